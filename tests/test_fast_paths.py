"""Every verify fast path against its reference (float32, CPU): compiled per-layout tree GDN, causal
chains and cached masks, matmul attention (the MLX-CUDA multi-query path, forced here), the CUDA
kernel's self-check/fallback machinery, and greedy engines equal to raw with the paths forced."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import KVCache

from contracts.sampling import SamplingParams
from engines import gdn
from engines.bundle import load_bundle
from engines.ddtree import DDTreeEngine
from engines.dflash import load_drafter
from engines.kernels import fast_paths, gdn_tree_cuda, using
from engines.kernels.attention import ops_attention, use_ops_attention
from engines.mtp import MTPEngine
from engines.mtp_head import load_mtp_head
from engines.prefill import prefill
from engines.raw import RawEngine
from engines.target import commit, forward_tree
from engines.tree import TreeLayout
from tests.engine_helpers import PROMPTS, run_engine

TOL = 1e-5
# chains, forks, slot order != depth order (slot 3 at depth 1 after slot 2 at depth 2)
TREES = [[-1], [-1, 0], [-1, 0, 1, 2, 3], [-1, 0, 0, 1, 2], [-1, 0, 1, 0, 2, 3, 3]]


@pytest.fixture(scope="module")
def bundle(tiny_target):
    return load_bundle(tiny_target, dtype="float32")


def _max_diff(a: mx.array, b: mx.array) -> float:
    return mx.abs(a - b).max().item()


def _verify(bundle, layout: TreeLayout, prompt: list[int], **paths):
    tokens = mx.array(np.random.RandomState(layout.size).randint(5, 500, size=layout.size), dtype=mx.uint32)
    with using(**paths):
        cache = bundle.make_cache()
        prefill(bundle, cache, prompt, last_alone=True)
        out = forward_tree(bundle, tokens, layout, cache, capture=(0, 2))
        deepest = max(range(layout.size), key=lambda s: (layout.depths[s], s))
        commit(bundle, cache, out, layout.path_to(deepest))
        mx.eval(out.hidden, [c.state for c in cache])
    return out, cache


@pytest.mark.parametrize("parents", TREES)
@pytest.mark.parametrize("paths", [dict(enabled=True), dict(enabled=True, ops_attention=True)], ids=["compiled", "ops-attention"])
def test_forward_tree_fast_equals_reference(bundle, parents, paths):
    layout = TreeLayout.from_parents(parents)
    prompt = bundle.tokenizer.encode(PROMPTS[3], add_special_tokens=False)
    ref, ref_cache = _verify(bundle, layout, prompt, enabled=False, cuda_kernel=False, ops_attention=False)
    fast, fast_cache = _verify(bundle, layout, prompt, cuda_kernel=False, **paths)
    assert _max_diff(ref.hidden, fast.hidden) <= TOL
    assert _max_diff(ref.layer_outputs[2], fast.layer_outputs[2]) <= TOL
    for i, snap in ref.snapshots.items():
        assert _max_diff(snap.state, fast.snapshots[i].state) <= TOL
        assert _max_diff(snap.conv, fast.snapshots[i].conv) <= TOL
    for c_ref, c_fast in zip(ref_cache, fast_cache):  # the committed caches agree too
        for a, b in zip(_cache_arrays(c_ref), _cache_arrays(c_fast)):
            assert a.shape == b.shape and _max_diff(a, b) <= TOL


def _cache_arrays(c) -> list[mx.array]:
    if isinstance(c, KVCache):
        return [c.keys[..., : c.offset, :], c.values[..., : c.offset, :]]
    return [c[0], c[1]]


@pytest.mark.parametrize("parents", TREES + [list(range(-1, 16)), [-1, 0, 0, 1, 1, 2, 2, 3, 4, 5]])
@pytest.mark.parametrize("heads", [(4, 16, 8), (8, 64, 64), (2, 32, 128)])
def test_chunked_recurrence_equals_the_level_loop(parents, heads):
    """The all-slots-at-once form (path-unrolled delta rule, nilpotent triangular solve) against the
    per-level loop: outputs and every slot's state, chains up to 17 slots and forked trees, random
    gates (some near 0), betas and normalised keys, float32."""
    tree = TreeLayout.from_parents(parents)
    hv, dk, dv = heads
    rng = np.random.default_rng(len(parents) * 7 + hv)
    T = tree.size
    k = rng.normal(size=(T, hv, dk)).astype(np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    args = (
        mx.array(rng.normal(size=(T, hv, dk)).astype(np.float32) * dk**-0.5), mx.array(k),
        mx.array(rng.normal(size=(T, hv, dv)).astype(np.float32)),
        mx.array(np.concatenate([rng.uniform(0.001, 1.0, size=(T, hv - 1)), np.full((T, 1), 1.0)], 1).astype(np.float32)),
        mx.array(rng.uniform(0.0, 1.0, size=(T, hv)).astype(np.float32)),
        mx.array(rng.normal(size=(1, hv, dv, dk)).astype(np.float32)),
    )
    y_ref, states_ref = gdn.recurrence_reference(*args, tree)
    y, states = gdn.recurrence_chunked(*args, tree)
    assert y.shape == y_ref.shape and states.shape == states_ref.shape
    assert _max_diff(y, y_ref) <= TOL and _max_diff(states, states_ref) <= TOL


def test_compiled_recurrence_is_cached_per_layout(bundle):
    layout = TreeLayout.from_parents([-1, 0, 0, 1])
    shape = gdn.GdnShape.of(bundle.layers[0].linear_attn)
    assert gdn._compiled_ops(shape, layout) is gdn._compiled_ops(shape, TreeLayout.from_parents([-1, 0, 0, 1]))
    assert gdn.conv_window_index(layout, 4) is gdn.conv_window_index(TreeLayout.from_parents([-1, 0, 0, 1]), 4)


def _tree_mask(parents: list[int], prefix: int) -> mx.array:
    layout = TreeLayout.from_parents(parents)
    return mx.concatenate([mx.ones((layout.size, prefix), dtype=mx.bool_), mx.array(layout.visibility)], axis=1)


@pytest.mark.parametrize("heads", [(4, 4), (6, 2), (8, 1)])
@pytest.mark.parametrize("mask", ["none", "causal", "tree"])
def test_ops_attention_matches_fused(heads, mask):
    hq, hkv = heads
    L, S, D = 5, 37, 32
    key = mx.random.key(hq * 10 + hkv)
    kq, kk, kv = mx.random.split(key, 3)
    q, k, v = mx.random.normal((1, hq, L, D), key=kq), mx.random.normal((1, hkv, S, D), key=kk), mx.random.normal((1, hkv, S, D), key=kv)
    m = {"none": None, "causal": "causal", "tree": _tree_mask([-1, 0, 0, 1, 2], S - L)}[mask]
    fused = mx.fast.scaled_dot_product_attention(q, k, v, scale=D**-0.5, mask=m)
    assert _max_diff(ops_attention(q, k, v, D**-0.5, m), fused) <= TOL


def test_ops_attention_is_automatic_only_on_cuda():
    q1, q5 = mx.zeros((1, 2, 1, 8)), mx.zeros((1, 2, 5, 8))
    assert not use_ops_attention(q1)
    assert use_ops_attention(q5) == gdn_tree_cuda.available()   # False on CPU CI: the fused op stays
    with using(ops_attention=True):
        assert use_ops_attention(q5) and not use_ops_attention(q1)


def test_drafter_ops_attention_equals_fused(bundle, tiny_drafter):
    drafter = load_drafter(tiny_drafter, bundle)
    context = drafter.new_context()
    rng = np.random.RandomState(0)
    features = [mx.array(rng.standard_normal((19, bundle.hidden_size)).astype(np.float32)) for _ in drafter.cfg.target_layer_ids]
    drafter.add_context(features, context)
    block = bundle.embed_tokens(mx.array([7] + [drafter.cfg.mask_token_id] * (drafter.cfg.block_size - 1), dtype=mx.uint32))
    with using(ops_attention=False):
        fused = drafter(block, context)
    with using(ops_attention=True):
        ops = drafter(block, context)
    assert _max_diff(fused, ops) <= TOL


def test_mtp_head_ops_attention_equals_fused(bundle):
    """The head appends an accepted pair (2 queries) after its prompt rows: matmul attention (the
    MLX-CUDA path) must equal the fused op; the 9-row prompt append is also compared."""
    head = load_mtp_head(bundle)
    rng = np.random.RandomState(1)
    appends = [(bundle.embed_tokens(mx.array(rng.randint(5, 500, size=n), dtype=mx.uint32))[None],
                mx.array(rng.standard_normal((1, n, bundle.hidden_size)).astype(np.float32))) for n in (9, 2, 1, 2)]
    outputs = {}
    for forced in (False, True):
        cache = KVCache()
        with using(ops_attention=forced):
            outputs[forced] = [head(embeds, hidden, cache) for embeds, hidden in appends]
    for fused, ops in zip(outputs[False], outputs[True]):
        assert _max_diff(fused, ops) <= TOL


class _FakeKernelBackend:
    """Stands in for MLX-CUDA: `kernel` is what gdn_tree_cuda would launch."""

    def __init__(self, monkeypatch, kernel):
        gdn_tree_cuda._checked.clear()
        monkeypatch.setattr(gdn_tree_cuda, "available", lambda: True)
        monkeypatch.setattr(gdn_tree_cuda, "supports_head_dim", lambda Dk: True)  # tiny model: Dk 16
        monkeypatch.setattr(gdn_tree_cuda, "gdn_tree_cuda", kernel)


def _reference_as_kernel(q, k, v, g, beta, root, parents):
    rep = v.shape[1] // k.shape[1]
    layout = TreeLayout.from_parents([int(p) for p in parents.tolist()])
    return gdn.recurrence_reference(mx.repeat(q, rep, 1), mx.repeat(k, rep, 1), v, g, beta, root[None], layout)


def test_cuda_kernel_path_is_used_when_it_passes_its_self_check(bundle, monkeypatch):
    _FakeKernelBackend(monkeypatch, _reference_as_kernel)
    layout = TreeLayout.from_parents([-1, 0, 1, 0, 2])
    prompt = bundle.tokenizer.encode(PROMPTS[1], add_special_tokens=False)
    ref, _ = _verify(bundle, layout, prompt, enabled=False, cuda_kernel=False)
    kernel, _ = _verify(bundle, layout, prompt, enabled=True, cuda_kernel=True)
    assert all(gdn_tree_cuda._checked.values()) and gdn_tree_cuda._checked
    assert _max_diff(ref.hidden, kernel.hidden) <= TOL
    gdn_tree_cuda._checked.clear()


def test_cuda_kernel_that_disagrees_turns_itself_off(bundle, monkeypatch):
    def wrong(*args):
        y, states = _reference_as_kernel(*args)
        return y + 1e-3, states

    _FakeKernelBackend(monkeypatch, wrong)
    shape = gdn.GdnShape.of(bundle.layers[0].linear_attn)
    assert not gdn._cuda_kernel_ok(shape)          # negative control: the check can fail
    layout = TreeLayout.from_parents([-1, 0, 0])
    prompt = bundle.tokenizer.encode(PROMPTS[2], add_special_tokens=False)
    ref, _ = _verify(bundle, layout, prompt, enabled=False, cuda_kernel=False)
    fallback, _ = _verify(bundle, layout, prompt, enabled=True, cuda_kernel=True)
    assert _max_diff(ref.hidden, fallback.hidden) <= TOL   # the compiled ops path took over
    gdn_tree_cuda._checked.clear()


def test_greedy_engines_equal_raw_with_forced_fast_paths(bundle, tiny_drafter):
    greedy = SamplingParams(temperature=0.0)
    engines = [MTPEngine(bundle, load_mtp_head(bundle)), DDTreeEngine(bundle, load_drafter(tiny_drafter, bundle), budget=4)]
    for text in PROMPTS[:3]:
        prompt = bundle.tokenizer.encode(text, add_special_tokens=False)
        raw, _ = run_engine(RawEngine(bundle), prompt, 24, greedy)
        with using(enabled=True, ops_attention=True):
            for engine in engines:
                assert run_engine(engine, prompt, 24, greedy)[0] == raw, engine.name
    assert fast_paths.enabled and fast_paths.ops_attention is None   # `using` restored the defaults


def test_profile_verify_steps_leave_the_cache_as_restored(bundle):
    """bench/profile_verify.py times every step on the same context: after a step and a restore,
    the next forward must see exactly the cache it saw before (else trials drift)."""
    from bench.profile_verify import CAUSAL_T, SHAPES, _restore, _snapshot, measure_costs, run_step

    prompt = bundle.tokenizer.encode(PROMPTS[0], add_special_tokens=False)
    cache = bundle.make_cache()
    prefill(bundle, cache, prompt, last_alone=True)
    saved = _snapshot(cache)
    probe = mx.array([11], dtype=mx.uint32)
    tokens = mx.array([5, 6, 7, 8, 9], dtype=mx.uint32)
    before = bundle.model(probe[None], cache=cache)
    _restore(cache, saved)
    steps = [(shape, False) for shape in SHAPES] + [(shape, True) for shape in CAUSAL_T]
    for shape, causal in steps:
        run_step(bundle, cache, shape, tokens, causal=causal)
        _restore(cache, saved)
        assert _max_diff(bundle.model(probe[None], cache=cache), before) == 0.0, (shape, causal)
        _restore(cache, saved)
    costs = measure_costs(bundle, ["reference", "fast", "mlx-lm"], context=24, trials=1)
    assert set(costs) == {"reference", "fast", "mlx-lm"} and all(row["c1"] > 0 for row in costs.values())
    assert costs["mlx-lm"]["c4"] > 0 and costs["mlx-lm"]["tree5"] is None   # mlx-lm's forward has no tree
