"""The chunked GatedDeltaNet prefill (engines.gdn_prefill) against mlx-lm's per-token loop it stands in for."""

from __future__ import annotations

import mlx.core as mx
import pytest

from engines.gdn_prefill import _LOOP, MIN_TOKENS, gated_delta_chunked


def _inputs(B, T, Hk, Hv, Dk, Dv, gate_low, seed=0, dtype=mx.float32):
    mx.random.seed(seed)
    q, k = mx.random.normal((B, T, Hk, Dk)), mx.random.normal((B, T, Hk, Dk))
    # as mlx-lm's normalize_qk leaves them: unit keys, queries scaled by Dk ** -0.5
    q = q / mx.linalg.norm(q, axis=-1, keepdims=True) * Dk ** -0.5
    k = k / mx.linalg.norm(k, axis=-1, keepdims=True)
    v = mx.random.normal((B, T, Hv, Dv))
    g = mx.random.uniform(gate_low, 1.0, (B, T, Hv))
    beta = mx.random.uniform(0.0, 1.0, (B, T, Hv))
    state = mx.random.normal((B, Hv, Dv, Dk)) * 0.1
    return [x.astype(dtype) for x in (q, k, v)] + [g, beta, state]


@pytest.mark.parametrize("B,T,Hk,Hv,Dk,Dv,gate_low", [
    (2, 150, 2, 4, 16, 8, 0.5),      # two sequences, grouped keys, a last chunk of 22
    (1, 300, 4, 8, 64, 64, 0.9),     # the demo's shapes, gates near 1 (long memory)
    (1, 200, 4, 8, 64, 64, 1e-3),    # gates near 0: decays underflow within a chunk
    (1, 64, 2, 2, 32, 32, 0.5),      # exactly one chunk
    (1, MIN_TOKENS, 2, 2, 32, 32, 0.5),
])
def test_chunks_equal_the_loop_in_float32(B, T, Hk, Hv, Dk, Dv, gate_low):
    args = _inputs(B, T, Hk, Hv, Dk, Dv, gate_low)
    y_loop, s_loop = _LOOP(*args)
    y, s = gated_delta_chunked(*args)
    assert y.shape == y_loop.shape and y.dtype == y_loop.dtype and s.shape == s_loop.shape
    assert float(mx.abs(y - y_loop).max()) < 1e-5 and float(mx.abs(s - s_loop).max()) < 1e-5


def test_near_parallel_keys_stay_exact():
    """Keys 0.01 apart with gates near 1 and large beta: the powers of the chunk's triangular system grow
    without bound (the plain doubling product overflowed at 64 rows), its inverse does not."""
    import engines.gdn_prefill as gdn_prefill

    mx.random.seed(1)
    base = mx.random.normal((1, 1, 2, 32))
    k = base + 0.01 * mx.random.normal((1, 256, 2, 32))
    k = k / mx.linalg.norm(k, axis=-1, keepdims=True)
    q = mx.random.normal((1, 256, 2, 32))
    q = q / mx.linalg.norm(q, axis=-1, keepdims=True) * 32 ** -0.5
    v = mx.random.normal((1, 256, 2, 32))
    g, beta = mx.random.uniform(0.95, 1.0, (1, 256, 2)), mx.random.uniform(0.5, 1.0, (1, 256, 2))
    y_loop, s_loop = _LOOP(q, k, v, g, beta)
    for chunk in (16, 32, 64, 128):
        gdn_prefill.CHUNK = chunk
        try:
            y, s = gated_delta_chunked(q, k, v, g, beta)
        finally:
            gdn_prefill.CHUNK = 32
        assert float(mx.abs(y - y_loop).max()) < 1e-5 and float(mx.abs(s - s_loop).max()) < 1e-5, chunk


def test_without_a_state_and_in_bfloat16():
    *args, _ = _inputs(1, 100, 2, 4, 32, 32, 0.5, dtype=mx.bfloat16)
    y_loop, s_loop = _LOOP(*args)
    y, s = gated_delta_chunked(*args)
    assert y.dtype == mx.bfloat16 and s.dtype == s_loop.dtype == mx.float32
    assert float(mx.abs(s - s_loop).max()) < 1e-5
    assert float(mx.abs(y.astype(mx.float32) - y_loop.astype(mx.float32)).max()) < 1e-2   # bf16 outputs


def test_short_runs_masks_and_per_key_gates_keep_the_loop():
    short = _inputs(1, MIN_TOKENS - 1, 2, 2, 16, 16, 0.5)
    for got, want in zip(gated_delta_chunked(*short), _LOOP(*short)):
        assert mx.array_equal(got, want)
    q, k, v, g, beta, state = _inputs(1, 40, 2, 2, 16, 16, 0.5)
    mask = mx.arange(40)[None] >= 3   # a padded batch row
    for got, want in zip(gated_delta_chunked(q, k, v, g, beta, state, mask), _LOOP(q, k, v, g, beta, state, mask)):
        assert mx.array_equal(got, want)
    per_key = mx.broadcast_to(g[..., None], (*g.shape, 16))
    for got, want in zip(gated_delta_chunked(q, k, v, per_key, beta, state), _LOOP(q, k, v, per_key, beta, state)):
        assert mx.array_equal(got, want)


def test_a_loaded_model_prefills_in_chunks(tiny_qwen_chat_target):
    """Loading a bundle puts the chunks in place of mlx-lm's loop, which its GatedDeltaNet layers then call."""
    import mlx_lm.models.gated_delta as mlx_gdn

    from engines.bundle import load_bundle

    load_bundle(tiny_qwen_chat_target)
    assert mlx_gdn.gated_delta_ops is gated_delta_chunked
