"""The pipelined speculative cycle (issue 18): tree building, walking, verify and commit with the
verdict on the device, checked against the host versions; engines queue cycle n+1 before reading
cycle n and stay lossless."""

from __future__ import annotations

import copy
from collections import Counter

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import KVCache

from contracts.engine import CancelToken
from contracts.sampling import SamplingParams
from engines import kernels
from engines.ddtree import DDTreeEngine, _TreeDrafting, build_tree, walk
from engines.dflash import load_drafter
from engines.mtp import MTPEngine, _MTPDrafting
from engines.mtp_head import load_mtp_head
from engines.prefill import prefill, prefill_cached
from engines.processing import TargetProcessor
from engines.raw import RawEngine, decode
from engines.sampling import Rng, SamplerConfig, log_probs
from engines.speculative import ChainVerdict, Prefilled, rollback
from engines.target import Cursor, commit, commit_device, forward_causal, forward_device, forward_tree
from engines.text import stream_text
from engines.tree import BestFirstTables, DeviceTree, TreeLayout, walk_device
from tests.engine_helpers import PROMPTS, encode, run_engine, tv_bound, tv_distance


def _root_paths(layout: TreeLayout, tokens) -> set[tuple[int, ...]]:
    return {tuple(tokens[s - 1] for s in layout.path_to(slot)[1:]) for slot in range(layout.size)}


def _device_paths(tree: DeviceTree, tokens: mx.array) -> set[tuple[int, ...]]:
    return _root_paths(TreeLayout.from_parents(tree.parents.tolist()), tokens.tolist())


@pytest.mark.parametrize("budget,depths,width", [(4, 7, 4), (3, 2, 3), (6, 5, 6), (2, 7, 2)])
def test_best_first_tables_match_the_heap(budget, depths, width):
    """The device builder picks the same prefixes as DDTree's heap (Algorithm 1), parents first,
    with conv windows and visibility equal to the layout's own."""
    rs = np.random.RandomState(budget * 10 + depths)
    kernel = 4
    tables = BestFirstTables(budget, depths, width, kernel)
    for trial in range(40):
        lp = -np.sort(rs.exponential(1.0 if trial % 2 else 0.2, size=(depths, width)), axis=1).astype(np.float32)
        lp[:, 0] = -rs.exponential(0.05, size=depths)   # the top candidate often near-certain
        lp = -np.sort(-lp, axis=1)
        tokens = np.stack([rs.permutation(50)[:width] for _ in range(depths)]).astype(np.int32)
        want = build_tree(lp, tokens, budget)
        got_tokens, tree = tables.tree(mx.array(lp), mx.array(tokens))
        assert _device_paths(tree, got_tokens) == _root_paths(want.layout, want.tokens)
        layout = TreeLayout.from_parents(tree.parents.tolist())   # raises unless parent < child, depths agree
        assert tree.depths.tolist() == list(layout.depths)
        assert np.array_equal(np.array(tree.visibility), layout.visibility)
        assert np.array_equal(np.array(tree.windows), layout.conv_windows(kernel))
        assert int(tree.max_depth.item()) == max(layout.depths)


def test_walk_device_equals_walk():
    rs = np.random.RandomState(3)
    for parents in ([-1, 0, 0, 1, 3], [-1, 0, 1, 2], [-1, 0, 0, 0, 2, 4, 4]):
        layout = TreeLayout.from_parents(parents)
        tree = DeviceTree.of(layout, 4)
        for _ in range(60):
            # siblings hold distinct tokens (as in every drafted tree)
            tokens = tuple(int(t) for t in rs.permutation(6)[: layout.size - 1] + 10 * np.array(layout.depths[1:]))
            pool = list(tokens) + [99]
            choices = [pool[rs.randint(len(pool))] for _ in range(layout.size)]
            path, bonus = walk(layout, tokens, choices)
            got = walk_device(tree, mx.array(tokens, dtype=mx.uint32), mx.array(choices))
            n = int(got.accepted.item())
            assert n == len(path) - 1
            assert got.path.tolist()[: n + 1] == path and int(got.last.item()) == path[-1]
            assert got.emitted.tolist()[: n + 1] == [tokens[s - 1] for s in path[1:]] + [bonus]


def _assert_caches_equal(ours, ref, length):
    for a, b in zip(ours, ref):
        if isinstance(a, KVCache):
            np.testing.assert_allclose(np.array(a.keys[..., :length, :]), np.array(b.keys[..., :length, :]), atol=1e-5)
            np.testing.assert_allclose(np.array(a.values[..., :length, :]), np.array(b.values[..., :length, :]), atol=1e-5)
        else:
            np.testing.assert_allclose(np.array(a[0]), np.array(b[0]), atol=1e-5)
            np.testing.assert_allclose(np.array(a[1]), np.array(b[1]), atol=1e-5)


@pytest.mark.parametrize("fast", [True, False])
def test_device_verify_and_commit_match_the_host_path(tiny_bundle, fast):
    """Cycles queued back to back with every verdict left on the device: logits equal the host
    forward's, and after any accept pattern the caches equal a sequential forward of the committed
    tokens (the device never wrote over a committed row)."""
    bundle = tiny_bundle
    rs = np.random.RandomState(1)
    vocab = bundle.embed_tokens.weight.shape[0]
    prompt = encode(bundle, PROMPTS[1])
    with kernels.using(enabled=fast):
        cache, host = bundle.make_cache(), bundle.make_cache()
        prefill(bundle, cache, prompt, last_alone=True)
        prefill(bundle, host, prompt, last_alone=True)
        cursor = Cursor.at(cache[bundle.decoder.fa_idx].offset)
        committed = list(prompt)
        layouts = [TreeLayout.from_parents(p) for p in ([-1, 0, 0, 1, 3], [-1, 0, 1], [-1, 0, 0, 2, 2, 1])]
        for step in range(9):
            layout = layouts[step % 3]
            ids = [int(t) for t in rs.randint(vocab, size=layout.size)]
            # the device tree: structure as data (no layout) unless it is a chain
            base = DeviceTree.of(layout, 4)
            tree = base if step % 3 == 1 else DeviceTree(layout.size, base.depths, base.parents, base.visibility,
                                                            base.windows)
            out = forward_device(bundle, mx.array(ids, dtype=mx.uint32), tree, cache, cursor)
            want = forward_tree(bundle, mx.array(ids, dtype=mx.uint32), layout, host)
            np.testing.assert_allclose(np.array(out.hidden), np.array(want.hidden), atol=1e-4)
            leaves = [s for s in range(layout.size)]
            path = layout.path_to(leaves[rs.randint(len(leaves))])
            padded = mx.array(path + [0] * (layout.size - len(path)), dtype=mx.int32)
            commit_device(bundle, cache, out, tree, padded, mx.array(path[-1]), mx.array(len(path)), cursor)
            commit(bundle, host, want, path)
            committed += [ids[s] for s in path]
            cursor.landed(len(path))
        assert cursor.known == len(committed)
        reference = bundle.make_cache()
        forward_causal(bundle, mx.array(committed, dtype=mx.uint32), reference)
        _assert_caches_equal(cache, reference, len(committed))


# -- the engines' pipelined cycles --------------------------------------------------------------
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def agree_engines(tiny_agree_bundle, tiny_agree_drafter):
    bundle = tiny_agree_bundle
    return bundle, {"mtp": MTPEngine(bundle, load_mtp_head(bundle)),
                    "ddtree": DDTreeEngine(bundle, load_drafter(tiny_agree_drafter, bundle), budget=4),
                    "dflash": DDTreeEngine(bundle, load_drafter(tiny_agree_drafter, bundle), budget=1)}


@pytest.mark.parametrize("name", ["mtp", "ddtree", "dflash"])
def test_cycle_n_plus_1_is_queued_before_cycle_n_is_read(agree_engines, name, monkeypatch):
    """The loop launches the next cycle before it lands the current one, and lands them in order;
    greedy output still equals raw's token for token."""
    bundle, engines = agree_engines
    engine = engines[name]
    events: list[tuple[str, int]] = []
    klass = _MTPDrafting if name == "mtp" else _TreeDrafting
    launch, land = klass.launch, klass.land

    def spy_launch(self, pending):
        flight = launch(self, pending)
        flight.index = len([e for e in events if e[0] == "launch"])
        events.append(("launch", flight.index))
        return flight

    def spy_land(self, flight):
        events.append(("land", flight.index))
        return land(self, flight)

    monkeypatch.setattr(klass, "launch", spy_launch)
    monkeypatch.setattr(klass, "land", spy_land)
    ids = encode(bundle, PROMPTS[3])
    got, steps = run_engine(engine, ids, 48, GREEDY)
    assert got == run_engine(RawEngine(bundle), ids, 48, GREEDY)[0]
    landed = [i for kind, i in events if kind == "land"]
    assert landed == list(range(len(landed))) and len(landed) >= 5
    for kind, i in events:
        if kind == "land":   # cycle i+1 was launched before cycle i was read
            assert events.index(("launch", i + 1)) < events.index(("land", i))
    assert any(s.accepted > 0 for s in steps) and any(s.drafted and s.accepted == 0 for s in steps)


def _fresh_state(bundle, engine, prompt, cfg, seed):
    """A request's state after prefill, with the first pending token fixed to the target's argmax."""
    cache = bundle.make_cache()
    processor = TargetProcessor(SamplingParams(temperature=cfg.temperature), prompt, bundle.tokenizer, bundle.vocab_size)
    pre, _, _ = prefill_cached(bundle, cache, prompt, engine.capture, last_alone=True)
    pending = int(mx.argmax(bundle.lm_head(pre.hidden[-1])).item())
    request = Prefilled(cache, mx.array(prompt, dtype=mx.uint32), pre, mx.array([pending], dtype=mx.uint32), cfg,
                        Rng(seed), engine.capture, processor)
    return engine.start(request), pending


def _exact_next_two(bundle, context, cfg):
    def dist(ids):
        pre = prefill(bundle, bundle.make_cache(), ids, last_alone=True)
        return np.array(mx.exp(log_probs(bundle.lm_head(pre.hidden[-1]), cfg)))

    p1 = dist(context)
    return {(int(a), int(b)): float(p1[a] * p2[b]) for a in np.nonzero(p1)[0]
            for p2 in [dist(context + [int(a)])] for b in np.nonzero(p2)[0]}


def _pipelined_draws(bundle, engine, prompt, cfg, n):
    """The two tokens after the pending one, n times, each from two back-to-back launches (the
    second queued before the first is read) on a copy of one prefilled state."""
    state, pending = _fresh_state(bundle, engine, prompt, cfg, seed=2024)
    counts: Counter = Counter()
    for i in range(n):
        draw = copy.deepcopy(state, {id(state.engine): state.engine, id(state.processor): state.processor})
        draw.rng = Rng(i)   # a copy would repeat the state's random stream
        first = draw.launch(mx.array(pending, dtype=mx.uint32))
        second = draw.launch(first.pending)
        tokens = draw.land(first).emitted + draw.land(second).emitted
        counts[(tokens[0], tokens[1])] += 1
    return counts, pending


def _uncertain_prompt(bundle, cfg):
    def peak(ids):
        pre = prefill(bundle, bundle.make_cache(), ids, last_alone=True)
        pending = int(mx.argmax(bundle.lm_head(pre.hidden[-1])).item())
        after = prefill(bundle, bundle.make_cache(), ids + [pending], last_alone=True)
        return float(mx.exp(log_probs(bundle.lm_head(after.hidden[-1]), cfg)).max().item())

    return min((encode(bundle, t) for t in PROMPTS[:8]), key=peak)


@pytest.mark.parametrize("name,biased", [("mtp", False), ("ddtree", False), ("mtp", True), ("ddtree", True)])
def test_pipelined_sampling_is_lossless(agree_engines, tiny_bundle, name, biased, monkeypatch):
    """Sampled pipelined cycles have the target's joint distribution of the next two tokens.
    Negative controls (the test must be able to fail): an MTP verify that always accepts the draft
    (with the random head, whose q is far from p), and a DDTree walk driven by the target's argmax."""
    cfg = SamplerConfig(temperature=1.0, top_p=1.0, top_k=3, min_p=0.0)
    if name == "mtp":
        bundle = tiny_bundle if biased else agree_engines[0]
        engine = MTPEngine(bundle, load_mtp_head(bundle)) if biased else agree_engines[1]["mtp"]
        if biased:
            import engines.mtp as mtp_module

            monkeypatch.setattr(mtp_module, "verify_one", lambda draft, *a: ChainVerdict(
                mx.array(True), mx.argmax(a[1][..., 1, :], axis=-1)))
    else:
        bundle, engine = agree_engines[0], agree_engines[1]["ddtree"]
        if biased:
            import engines.ddtree as ddtree_module

            monkeypatch.setattr(ddtree_module, "choose", lambda logits, cfg, rng: mx.argmax(logits, axis=-1))
    prompt = _uncertain_prompt(bundle, cfg)
    n = 1000
    counts, pending = _pipelined_draws(bundle, engine, prompt, cfg, n)
    exact = _exact_next_two(bundle, prompt + [pending], cfg)
    tv, bound = tv_distance(counts, exact, n), tv_bound(len(exact), n)
    assert (tv > bound) if biased else (tv < bound), (tv, bound)


@pytest.mark.parametrize("name", ["mtp", "ddtree"])
def test_rollback_undoes_a_queued_cycle_exactly(agree_engines, name):
    """A cycle queued behind the one read, then rolled back (a hand-off, the end of a request):
    the caches hold exactly the tokens read, and plain decoding continues from them as raw would."""
    bundle, engines = agree_engines
    engine = engines[name]
    prompt = encode(bundle, PROMPTS[4])
    want = run_engine(RawEngine(bundle), prompt, 40, GREEDY)[0]
    cfg = SamplerConfig(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0)
    state, pending = _fresh_state(bundle, engine, prompt, cfg, seed=0)
    assert pending == want[0]
    tokens = [pending]
    flight = state.launch(mx.array(pending, dtype=mx.uint32))
    for _ in range(3):
        following = state.launch(flight.pending)
        tokens += state.land(flight).emitted
        flight = following
    rollback(state, flight)
    rest = decode(bundle, state.cache, tokens[-1], cfg, Rng(0), CancelToken())
    while len(tokens) < 40:
        tokens += next(rest).tokens
    assert tokens[:40] == want


@pytest.mark.parametrize("name", ["mtp", "ddtree"])
def test_stop_strings_and_eos_inside_an_accepted_run(agree_engines, name):
    """Streaming one cycle late: a stop string or EOS that lands inside a cycle's accepted run ends
    the text exactly where raw's does."""
    bundle, engines = agree_engines
    tokenizer = bundle.tokenizer
    for text in PROMPTS[:6]:
        ids = encode(bundle, text)
        raw_tokens = run_engine(RawEngine(bundle), ids, 40, GREEDY)[0]
        full = tokenizer.decode(raw_tokens)
        stop = full[len(full) // 2: len(full) // 2 + 3]
        eos = frozenset({raw_tokens[25]})
        for stops, eos_ids in (((stop,), frozenset()), ((), eos)):
            outs = []
            for engine in (RawEngine(bundle), engines[name]):
                chunks = list(stream_text(engine.generate(ids, GREEDY, _Never()), tokenizer, eos_token_ids=eos_ids,
                                          max_tokens=40, stops=stops, prompt_tokens=len(ids), cancelled=lambda: False))
                # token ids after a stop string follow the step's granularity (as before): compare them at EOS
                tokens = [t for c in chunks for t in c.token_ids] if not stops else []
                outs.append(("".join(c.text for c in chunks), tokens, chunks[-1].finish_reason))
            assert outs[0] == outs[1], (text, stops)
            assert outs[0][2] == "stop"
            assert chunks[-1].stop_sequence == (stop if stops else None)   # which stop string ended it


class _Never:
    cancelled = False


@pytest.mark.parametrize("name", ["mtp", "ddtree", "dflash"])
def test_pipelined_and_host_cycles_take_the_same_steps(agree_engines, name):
    """Greedy, the pipelined cycle drafts the same trees and accepts the same runs as the host cycle
    (the device builder picks the heap's prefixes): identical tokens and per-step acceptance."""
    bundle, engines = agree_engines
    for text in PROMPTS[6:9]:
        ids = encode(bundle, text)
        runs = []
        for pipelined in (True, False):
            with kernels.using(pipelined=pipelined):
                tokens, steps = run_engine(engines[name], ids, 48, GREEDY)
            runs.append((tokens, [(s.drafted, s.accepted, s.accepted_positions) for s in steps]))
        assert runs[0] == runs[1], text


def test_drafter_context_holes_are_invisible(tiny_agree_bundle, tiny_agree_drafter):
    """Context rows appended with rejected slots as holes give the drafter exactly the block states a
    context of the accepted rows alone gives (positions and masks agree)."""
    bundle = tiny_agree_bundle
    drafter = load_drafter(tiny_agree_drafter, bundle)
    rs = np.random.RandomState(5)
    hidden = bundle.hidden_size
    layers = len(drafter.cfg.target_layer_ids)
    with_holes, dense = drafter.new_context(), drafter.new_context()
    prompt_rows = [mx.array(rs.randn(6, hidden).astype(np.float32)) for _ in range(layers)]
    drafter.add_context(prompt_rows, with_holes)
    drafter.add_context(prompt_rows, dense)
    for accepted in (3, 1, 5, 2):
        rows = [mx.array(rs.randn(5, hidden).astype(np.float32)) for _ in range(layers)]
        drafter.add_context(rows, with_holes, mx.arange(5) < accepted)
        drafter.add_context([r[:accepted] for r in rows], dense)
    assert int(with_holes.length.item()) == dense.length
    block = bundle.embed_tokens(mx.array([7] + [drafter.cfg.mask_token_id] * (drafter.cfg.block_size - 1)))
    np.testing.assert_allclose(np.array(drafter(block, with_holes)), np.array(drafter(block, dense)), atol=1e-5)


def test_pipelined_cycles_are_automatic_per_device(monkeypatch):
    """On by default on a GPU, off on the CPU backend (nothing to overlap there); the environment or
    the switch override it."""
    monkeypatch.delenv("SWITCHYARD_PIPELINED", raising=False)
    with kernels.using():
        assert kernels.pipelined_cycles() == (mx.default_device() == mx.gpu)
        monkeypatch.setenv("SWITCHYARD_PIPELINED", "0")
        assert not kernels.pipelined_cycles()
        monkeypatch.setenv("SWITCHYARD_PIPELINED", "1")
        assert kernels.pipelined_cycles()
    with kernels.using(pipelined=False):
        assert not kernels.pipelined_cycles()


@pytest.mark.parametrize("name", ["mtp", "ddtree", "dflash"])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_one_host_read_per_pipelined_cycle(agree_engines, name, temperature, monkeypatch):
    """A pipelined cycle reads the device once (its land): no draft, tree or verdict read between."""
    bundle, engines = agree_engines
    gen = engines[name].generate(encode(bundle, PROMPTS[0]), SamplingParams(temperature=temperature, seed=1), _Never())
    next(gen), next(gen)   # prefill and the first cycle
    reads: list[str] = []
    for owner, attr in ((mx.array, "item"), (mx.array, "tolist"), (mx, "eval"), (np, "array")):
        original = getattr(owner, attr)
        monkeypatch.setattr(owner, attr, lambda *a, _o=original, _n=attr, **k: reads.append(_n) or _o(*a, **k))
    for _ in range(8):
        next(gen)
    monkeypatch.undo()
    gen.close()
    assert reads == ["tolist"] * 8


@pytest.mark.parametrize("name", ["mtp", "ddtree", "ddtree-window"])
def test_long_pipelined_generation_grows_the_caches(agree_engines, tiny_agree_drafter, name):
    """Past the attention buffers' first 256 rows (grown while a cycle is in flight) and, with a small
    drafter window, past the drafter context's trim (holes count as rows there): still raw's tokens."""
    bundle, engines = agree_engines
    engine = engines.get(name) or DDTreeEngine(bundle, engines["ddtree"].drafter, budget=4, context_sink=4,
                                              context_window=24)
    ids = encode(bundle, PROMPTS[10])
    want = run_engine(RawEngine(bundle), ids, 300, GREEDY)[0]
    got, steps = run_engine(engine, ids, 300, GREEDY)
    assert got == want
    assert any(s.accepted for s in steps)
