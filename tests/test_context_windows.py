"""The heads' context windows (a family's serving.json): an MTP head that sees only the prompt's last
rows, a DFlash drafter whose context keeps a sink and a window. Drafts only propose: outputs stay raw's."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest

from contracts.errors import ModelLoadError
from contracts.sampling import SamplingParams
from engines.checkpoint import ServingHints, serving_hints
from engines.ddtree import DDTreeEngine
from engines.dflash import load_drafter
from engines.mtp import MTPEngine
from engines.mtp_head import load_mtp_head
from engines.raw import RawEngine
from tests.engine_helpers import PROMPTS, encode, run_engine

GREEDY = SamplingParams(temperature=0.0)
LONG = "\n".join(PROMPTS) * 2   # longer than the windows below


def test_an_mtp_head_with_a_prompt_window_stays_lossless_and_skips_the_prompts_start(tiny_agree_bundle):
    bundle = tiny_agree_bundle
    ids = encode(bundle, LONG)
    assert len(ids) > 64
    want, _ = run_engine(RawEngine(bundle), ids, 48, GREEDY)
    full = MTPEngine(bundle, load_mtp_head(bundle))
    windowed = MTPEngine(bundle, load_mtp_head(bundle), prompt_window=16)
    got_full, _ = run_engine(full, ids, 48, GREEDY)
    got, steps = run_engine(windowed, ids, 48, GREEDY)
    assert got == got_full == want
    assert sum(s.accepted for s in steps) > 0
    head_rows = []
    original = windowed.head_rows

    def counting(next_tokens, hidden, cache):
        head_rows.append(next_tokens.shape[0])
        return original(next_tokens, hidden, cache)

    windowed.head_rows = counting
    run_engine(windowed, ids, 4, GREEDY)
    assert head_rows[0] == 16          # the prompt's rows: only the window's


def _context_state(context):
    mx.eval(context.keys, context.values, context.positions)
    return ([np.array(k) for k in context.keys], [np.array(v) for v in context.values], np.array(context.positions),
            int(context.length))


@pytest.mark.parametrize("sink, window, done", [(4, 16, 0), (4, 16, 10), (0, 8, 0), (4, None, 0), (64, 4096, 0)])
def test_prompt_rows_outside_the_window_are_not_computed_and_the_context_is_the_same(
        tiny_agree_bundle, tiny_agree_drafter, sink, window, done):
    bundle = tiny_agree_bundle
    engine = DDTreeEngine(bundle, load_drafter(tiny_agree_drafter, bundle), context_sink=sink, context_window=window)
    total = 60
    layers = {i: mx.random.normal((total, bundle.hidden_size), key=mx.random.key(i)) for i in engine.layer_ids}
    reference = engine.drafter.new_context(sink, window)
    engine.drafter.add_context(engine._features(layers, slice(0, done)), reference) if done else None
    engine.drafter.add_context(engine._features(layers, slice(done, total)), reference)
    context = engine.drafter.new_context(sink, window)
    engine.drafter.add_context(engine._features(layers, slice(0, done)), context) if done else None
    added = []
    original = engine.drafter.add_context
    engine.drafter.add_context = lambda features, ctx, valid=None: (added.append(features[0].shape[0]),
                                                                     original(features, ctx, valid))
    engine._add_prompt_rows(layers, done, total, context)
    engine.drafter.add_context = original
    for got, want in zip(_context_state(context), _context_state(reference)):
        if isinstance(got, list):
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, want)
    if window is not None and sink + window < total - done:
        assert sum(added) == max(0, sink - done) + window


def test_a_windowed_drafter_stays_lossless(tiny_agree_bundle, tiny_agree_drafter):
    bundle = tiny_agree_bundle
    ids = encode(bundle, LONG)
    want, _ = run_engine(RawEngine(bundle), ids, 40, GREEDY)
    engine = DDTreeEngine(bundle, load_drafter(tiny_agree_drafter, bundle), context_sink=4, context_window=16)
    got, steps = run_engine(engine, ids, 40, GREEDY)
    assert got == want
    assert sum(s.accepted for s in steps) > 0


def test_serving_hints(tmp_path):
    target = tmp_path / "family" / "target"
    target.mkdir(parents=True)
    assert serving_hints(target) == ServingHints()          # none: the heads see their whole context
    (target.parent / "serving.json").write_text(json.dumps({"mtp_prompt_window": 256, "drafter_context_window": None}))
    hints = serving_hints(target)
    assert hints.mtp_prompt_window == 256 and hints.drafter_context_window is None
    (target.parent / "serving.json").write_text(json.dumps({"mtp_prompt_window": 0}))
    with pytest.raises(ModelLoadError, match="serving hints"):
        serving_hints(target)
    (target.parent / "serving.json").write_text(json.dumps({"mtp_window": 256}))
    with pytest.raises(ModelLoadError):
        serving_hints(target)


def test_the_demo_family_ships_its_windows():
    from engines.checkpoint import DEMO_FAMILY

    hints = serving_hints(DEMO_FAMILY / "target")
    assert hints.mtp_prompt_window == 512 and hints.drafter_context_window == 512
    assert hints.greedy_tree_temperature == 0.7


def _record_tree_depths(engine: DDTreeEngine) -> list[int]:
    """The deepest node of every tree the engine drafts (host and pipelined paths)."""
    deepest: list[int] = []
    device_tree, draft = engine.device_tree, engine._draft

    def on_device(proposal):
        tokens, tree = device_tree(proposal)
        deepest.append(int(mx.max(tree.depths).item()))
        return tokens, tree

    def on_host(proposal, processor=None):
        tree = draft(proposal, processor)
        deepest.append(max(tree.layout.depths))
        return tree

    engine.device_tree, engine._draft = on_device, on_host
    return deepest


def test_a_greedy_tree_temperature_reshapes_the_trees_and_stays_lossless(tiny_bundle, tiny_drafter):
    """The tree temperature only re-scores paths: a sharp one drafts chains (a sibling never beats going
    deeper), a flat one branches; both emit raw's greedy tokens. Sampled requests keep the drafter's
    own scores, so their trees and outputs do not depend on it."""
    bundle = tiny_bundle
    ids = encode(bundle, PROMPTS[0])
    want, _ = run_engine(RawEngine(bundle), ids, 40, GREEDY)
    shapes, chain = {}, 0
    for temperature in (0.02, 4.0):
        engine = DDTreeEngine(bundle, load_drafter(tiny_drafter, bundle), greedy_tree_temperature=temperature)
        deepest, chain = _record_tree_depths(engine), engine.depths(engine.budget)   # a chain's depth
        got, _ = run_engine(engine, ids, 40, GREEDY)
        assert got == want
        shapes[temperature] = deepest
    assert shapes[0.02] and all(d == chain for d in shapes[0.02])       # chains only
    assert any(d < chain for d in shapes[4.0])                          # some trees branch
    sampled = SamplingParams(temperature=0.8, seed=3)
    outputs = [run_engine(DDTreeEngine(bundle, load_drafter(tiny_drafter, bundle), greedy_tree_temperature=t),
                          ids, 40, sampled)[0] for t in (1.0, 0.02)]
    assert outputs[0] == outputs[1]
    with pytest.raises(ValueError):
        DDTreeEngine(bundle, load_drafter(tiny_drafter, bundle), greedy_tree_temperature=0.0)


def test_a_familys_serving_hints_reach_its_engines(tiny_target, tiny_drafter, tmp_path):
    import shutil

    from engines.runtime import load_runtime

    shutil.copytree(tiny_target, tmp_path / "target")
    shutil.copytree(tiny_drafter, tmp_path / "drafter")
    (tmp_path / "serving.json").write_text(json.dumps(
        {"mtp_prompt_window": 24, "drafter_context_window": 40, "greedy_tree_temperature": 0.5}))
    runtime = load_runtime(tmp_path / "target", dtype="float32")
    mtp, ddtree = runtime.engines["mtp"], runtime.engines["ddtree"]
    assert mtp.prompt_window == 24
    assert (ddtree.context_window, ddtree.greedy_tree_temperature) == (40, 0.5)


def test_the_prompts_rows_are_released_once_the_engines_have_read_them(tiny_agree_target, tiny_agree_drafter,
                                                                        monkeypatch):
    """A speculative request's prefill output (the hidden states the MTP head reads, the captured layers of the
    drafter's window; without windows every prompt row's) goes into the engines' own state as they start: the
    reply does not keep it (on a 27B-class model ~1.2 GiB at 100k tokens, for as long as the reply runs)."""
    import gc
    import weakref

    import engines.speculative as speculative
    from contracts.engine import CancelToken
    from engines.runtime import load_runtime

    runtime = load_runtime(str(tiny_agree_target), draft_dir=str(tiny_agree_drafter))
    outputs: list[weakref.ref] = []
    prefill = speculative.prefill_stepwise

    def watched(*args, **kwargs):
        result = yield from prefill(*args, **kwargs)
        outputs.append(weakref.ref(result[0]))
        return result

    monkeypatch.setattr(speculative, "prefill_stepwise", watched)
    ids = encode(runtime.bundle, PROMPTS[0])
    for engine in ("mtp", "ddtree"):
        chunks = runtime.generate(ids, SamplingParams(temperature=0.0, max_tokens=40), engine, CancelToken())
        next(chunks), next(chunks)
        gc.collect()
        assert len(outputs) == 1 and outputs.pop()() is None, engine   # still decoding; the prompt's rows are gone
        chunks.close()
