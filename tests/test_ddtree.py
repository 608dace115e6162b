"""DFlash drafter + DDTree: exact tree verify, commit, tree builder, losslessness, memory."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import mlx.core as mx
import numpy as np
import pytest

from contracts.errors import ModelLoadError
from contracts.sampling import SamplingParams
from engines.ddtree import DDTreeEngine, build_tree, chain_tree, walk
from engines.dflash import load_drafter
from engines.prefill import prefill
from engines.raw import RawEngine
from engines.sampling import Rng, SamplerConfig, log_probs
from engines.target import commit, forward_causal, forward_tree
from engines.tree import TreeLayout
from tests.engine_helpers import PROMPTS, encode, run_engine, tv_bound, tv_distance

GREEDY = SamplingParams(temperature=0.0)
# slot order is not depth order: slot 3 (depth 1) comes after slot 2 (depth 2)
TREES = [[-1, 0, 1, 0, 2, 3, 3], [-1, 0, 0, 0, 1, 4, 2], [-1, 0, 1, 2, 3]]


@pytest.mark.parametrize("parents", TREES)
def test_tree_verify_equals_sequential_paths(tiny_bundle, parents):
    bundle = tiny_bundle
    layout = TreeLayout.from_parents(parents)
    prompt = encode(bundle, PROMPTS[1])
    tokens = mx.array(np.random.RandomState(len(parents)).randint(5, 500, size=layout.size), dtype=mx.uint32)
    cache = bundle.make_cache()
    prefill(bundle, cache, prompt, last_alone=True)
    out = forward_tree(bundle, tokens, layout, cache, capture=(0, 2))
    tree_logits = bundle.lm_head(out.hidden)
    for slot in range(layout.size):
        path = mx.array(layout.path_to(slot))
        ref_cache = bundle.make_cache()
        prefill(bundle, ref_cache, prompt, last_alone=True)
        ref = forward_causal(bundle, tokens[path], ref_cache, capture=(0, 2))
        # float32 rounding only: the verify sums the recurrence in another order than a decode
        assert mx.allclose(bundle.lm_head(ref.hidden[-1]), tree_logits[slot], rtol=1e-5, atol=1e-5).item()
        assert mx.allclose(ref.layer_outputs[2][-1], out.layer_outputs[2][slot], rtol=1e-5, atol=1e-5).item()
    if layout.parents == TreeLayout.chain(layout.size).parents:
        return  # for a chain the causal verify IS the tree verify
    # negative control: a plain causal verify of the flattened tree is wrong
    flat_cache = bundle.make_cache()
    prefill(bundle, flat_cache, prompt, last_alone=True)
    flat = bundle.lm_head(forward_causal(bundle, tokens, flat_cache).hidden)
    assert mx.abs(flat - tree_logits).max().item() > 1e-3


@pytest.mark.parametrize("parents", TREES)
def test_commit_matches_fresh_forward(tiny_bundle, parents):
    bundle = tiny_bundle
    layout = TreeLayout.from_parents(parents)
    prompt = encode(bundle, PROMPTS[4])
    tokens = mx.array(np.random.RandomState(3).randint(5, 500, size=layout.size), dtype=mx.uint32)
    deepest = max(range(layout.size), key=lambda s: (layout.depths[s], s))
    path = layout.path_to(deepest)
    cache = bundle.make_cache()
    prefill(bundle, cache, prompt, last_alone=True)
    out = forward_tree(bundle, tokens, layout, cache)
    commit(bundle, cache, out, path)
    follow = mx.array([7], dtype=mx.uint32)
    after = bundle.lm_head(forward_causal(bundle, follow, cache).hidden[-1])
    sequence = mx.concatenate([mx.array(prompt, dtype=mx.uint32), tokens[mx.array(path)], follow])
    fresh_cache = bundle.make_cache()
    fresh = bundle.lm_head(forward_causal(bundle, sequence, fresh_cache).hidden[-1])
    def close(a, b) -> bool:  # float32 rounding only (the verify sums the recurrence in another order)
        return mx.allclose(a, b, rtol=1e-5, atol=1e-5).item()

    assert close(after, fresh)
    for ours, ref in zip(cache, fresh_cache):
        if hasattr(ours, "offset"):
            assert ours.offset == ref.offset
            assert close(ours.keys[..., : ours.offset, :], ref.keys[..., : ref.offset, :])
        else:
            assert close(ours[0], ref[0]) and close(ours[1], ref[1])


def test_tree_builder_is_brute_force_top_b():
    rs = np.random.RandomState(0)
    for _ in range(300):
        depths, width, budget = rs.randint(1, 5), rs.randint(1, 5), rs.randint(1, 10)
        top_lp = -np.sort(rs.exponential(size=(depths, width)), axis=1)
        top_tok = rs.permutation(1000)[: depths * width].reshape(depths, width)
        tree = build_tree(top_lp, top_tok, budget)
        scores = []
        for d in range(1, depths + 1):
            for ranks in itertools.product(range(width), repeat=d):
                scores.append(sum(top_lp[i, r] for i, r in enumerate(ranks)))
        want = sorted(scores, reverse=True)[:budget]
        got = []
        for slot in range(1, tree.layout.size):
            assert tree.layout.parents[slot] < slot
            path = tree.layout.path_to(slot)[1:]
            got.append(sum(top_lp[tree.layout.depths[s] - 1, list(top_tok[tree.layout.depths[s] - 1]).index(tree.tokens[s - 1])] for s in path))
        np.testing.assert_allclose(sorted(got, reverse=True), want)
    chain = chain_tree(np.array([[5, 6], [7, 8], [9, 1]]))
    assert chain.tokens == (5, 7, 9) and chain.layout.parents == (-1, 0, 1, 2)


def test_walk_follows_target_choices():
    layout = TreeLayout.from_parents([-1, 0, 0, 1, 3])
    tokens = (10, 11, 12, 13)
    assert walk(layout, tokens, [11, 0, 0, 0, 0]) == ([0, 2], 0)
    assert walk(layout, tokens, [10, 12, 0, 13, 42]) == ([0, 1, 3, 4], 42)
    assert walk(layout, tokens, [99, 0, 0, 0, 0]) == ([0], 99)


@pytest.fixture(scope="module")
def raw_outputs(tiny_agree_bundle):
    raw = RawEngine(tiny_agree_bundle)
    return {text: run_engine(raw, encode(tiny_agree_bundle, text), 64, GREEDY)[0] for text in PROMPTS[:20]}


@pytest.mark.parametrize("budget", [4, 2, 1])
def test_greedy_equals_raw(tiny_agree_bundle, tiny_agree_drafter, raw_outputs, budget):
    drafter = load_drafter(tiny_agree_drafter, tiny_agree_bundle)
    engine = DDTreeEngine(tiny_agree_bundle, drafter, budget=budget)
    depths = Counter()
    for text, want in raw_outputs.items():
        got, steps = run_engine(engine, encode(tiny_agree_bundle, text), 64, GREEDY)
        assert got == want, text
        depths.update(s.accepted for s in steps if s.drafted)
    assert depths[0] > 0                       # immediate rejects
    assert sum(v for k, v in depths.items() if k >= 2) > 0   # deep accepts


class _RowCounter:
    """The drafter, recording how many block rows each draft feeds it."""

    def __init__(self, drafter):
        self.drafter, self.rows = drafter, []

    def __getattr__(self, name):
        return getattr(self.drafter, name)

    def __call__(self, block_embeds, context):
        self.rows.append(block_embeds.shape[0])
        return self.drafter(block_embeds, context)


@pytest.mark.parametrize("budget, rows", [(2, 3), (3, 4), (4, 4), (1, 4)])
def test_a_draft_is_as_deep_as_its_tree(tiny_agree_bundle, tiny_agree_drafter, raw_outputs, budget, rows):
    # a tree of B nodes reaches depth B at most: the block is 1 + B rows (capped by the drafter's
    # block of 4); budget 1 is DFlash's chain over the whole block
    engine = DDTreeEngine(tiny_agree_bundle, load_drafter(tiny_agree_drafter, tiny_agree_bundle), budget=budget)
    counter = _RowCounter(engine.drafter)
    engine.drafter = counter
    text, want = next(iter(raw_outputs.items()))
    got, steps = run_engine(engine, encode(tiny_agree_bundle, text), 64, GREEDY)
    assert got == want
    assert counter.rows and set(counter.rows) == {rows}
    assert max(s.accepted for s in steps) <= rows - 1


def test_greedy_equals_raw_random_drafter(tiny_bundle, tiny_drafter):
    engine = DDTreeEngine(tiny_bundle, load_drafter(tiny_drafter, tiny_bundle), budget=8)
    raw = RawEngine(tiny_bundle)
    for text in PROMPTS[:5]:
        ids = encode(tiny_bundle, text)
        assert run_engine(engine, ids, 40, GREEDY)[0] == run_engine(raw, ids, 40, GREEDY)[0]


def _exact_next_two(bundle, context, cfg):
    """Exact raw joint of the next two sampled tokens after `context` (pending token included)."""
    def dist(ids):
        pre = prefill(bundle, bundle.make_cache(), ids, last_alone=True)
        return np.array(mx.exp(log_probs(bundle.lm_head(pre.hidden[-1]), cfg)))

    p2 = dist(context)
    joint = {}
    for x2 in np.nonzero(p2)[0]:
        p3 = dist(context + [int(x2)])
        for x3 in np.nonzero(p3)[0]:
            joint[(int(x2), int(x3))] = float(p2[x2] * p3[x3])
    return joint, dist


@pytest.mark.parametrize("biased", [False, True])
def test_sampling_lossless(tiny_agree_bundle, tiny_agree_drafter, biased):
    """Given the prompt and a pending token, the first two tokens after it follow the target's
    distribution: draws use the engine's own draft tree, one tree verify and the sampled walk."""
    cfg = SamplerConfig(temperature=1.0, top_p=0.9, top_k=5, min_p=0.0)
    drafter = load_drafter(tiny_agree_drafter, tiny_agree_bundle)
    engine = DDTreeEngine(tiny_agree_bundle, drafter, budget=4)

    def pending_after(ids):
        return int(mx.argmax(tiny_agree_bundle.lm_head(prefill(tiny_agree_bundle, tiny_agree_bundle.make_cache(), ids, last_alone=True).hidden[-1])).item())

    def root_peak(ids):
        pre = prefill(tiny_agree_bundle, tiny_agree_bundle.make_cache(), ids + [pending_after(ids)], last_alone=True)
        return float(mx.exp(log_probs(tiny_agree_bundle.lm_head(pre.hidden[-1]), cfg)).max().item())

    # a context where the target is uncertain, so a wrong walk shows in the distribution
    prompt = min((encode(tiny_agree_bundle, t) for t in PROMPTS[:10]), key=root_peak)
    pending = pending_after(prompt)
    joint, dist = _exact_next_two(tiny_agree_bundle, prompt + [pending], cfg)

    cache = tiny_agree_bundle.make_cache()
    pre = prefill(tiny_agree_bundle, cache, prompt, capture=engine.layer_ids, last_alone=True)
    context = drafter.new_context()
    drafter.add_context(engine._features(pre.layer_outputs, slice(None)), context)
    tree = engine._draft(engine._propose(pending, context))
    out = forward_tree(tiny_agree_bundle, mx.array((pending,) + tree.tokens, dtype=mx.uint32), tree.layout, cache)
    node_lp = log_probs(tiny_agree_bundle.lm_head(out.hidden), cfg)
    root_argmax = int(mx.argmax(node_lp[0]).item())
    third = {}  # x2 -> distribution of the token after it, when the walk stops at the root
    rng, n, counts = Rng(99), 20000, Counter()
    followups = np.random.default_rng(5)
    for _ in range(n):
        choices = rng.categorical(node_lp).tolist()
        if biased:  # negative control: a walk that takes the target's argmax at the root
            choices[0] = root_argmax
        path, bonus = walk(tree.layout, tree.tokens, choices)
        emitted = [tree.tokens[s - 1] for s in path[1:]] + [bonus]
        if len(emitted) == 1:  # the next cycle's root sample supplies the second token
            x2 = emitted[0]
            if x2 not in third:
                third[x2] = dist(prompt + [pending, x2])
            p3 = third[x2]
            emitted.append(int(followups.choice(len(p3), p=p3 / p3.sum())))
        counts[(emitted[0], emitted[1])] += 1
    tv, bound = tv_distance(counts, joint, n), tv_bound(len(joint), n)
    assert (tv > 2 * bound) if biased else (tv < bound), (tv, bound)


def test_sampled_engine_seeded(tiny_agree_bundle, tiny_agree_drafter):
    engine = DDTreeEngine(tiny_agree_bundle, load_drafter(tiny_agree_drafter, tiny_agree_bundle), budget=4)
    params = SamplingParams(temperature=1.0, top_p=0.95, top_k=20, seed=11)
    ids = encode(tiny_agree_bundle, PROMPTS[5])
    a, _ = run_engine(engine, ids, 32, params)
    b, _ = run_engine(engine, ids, 32, params)
    assert a == b


def test_memory_grows_by_drafter_only(tiny_bundle, tiny_drafter):
    mx.clear_cache()
    before = mx.get_active_memory()
    drafter = load_drafter(tiny_drafter, tiny_bundle)
    mx.clear_cache()
    grown = mx.get_active_memory() - before
    assert grown <= drafter.nbytes() * 1.05 + 65536, (grown, drafter.nbytes())


def test_drafter_config_errors(tiny_bundle, tiny_drafter, tmp_path):
    with pytest.raises(ModelLoadError):
        load_drafter(tmp_path / "missing", tiny_bundle)
    bad = tmp_path / "bad"
    bad.mkdir()
    raw = json.loads((tiny_drafter / "config.json").read_text())
    raw["dflash_config"]["target_layer_ids"] = [99]
    (bad / "config.json").write_text(json.dumps(raw))
    (bad / "model.safetensors").write_bytes((tiny_drafter / "model.safetensors").read_bytes())
    with pytest.raises(ModelLoadError, match="target_layer_ids"):
        load_drafter(bad, tiny_bundle)
