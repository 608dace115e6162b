"""Multi-query attention for verifies and drafts without per-shape setup on MLX-CUDA.

MLX-CUDA runs `mx.fast.scaled_dot_product_attention` with one query through its vector kernel and
with more queries through a cuDNN graph built and cached per shape. A verify (2..9 queries) or a
DFlash draft (a block of queries) sees a new key length every cycle, so it pays a graph build per
cycle; raw decode (one query) never does. Measured on an H200 (bench/RESULTS-verify.md): engine steps
that met a key length for the first time cost several times those that met it again.
This path is plain matmul + softmax (cuBLAS, no per-shape graph) with grouped-query heads folded
into the query axis instead of repeating K/V. Elsewhere the fused op stays (CPU: the same ops;
Metal: no per-shape setup).
"""

from __future__ import annotations

import mlx.core as mx

from . import fast_paths

# A verify tree, a draft block or a head's accepted rows: few queries. Beyond this (a prefill chunk)
# the scores matrix would be large and one graph build per chunk shape is amortised anyway.
MAX_OPS_QUERIES = 64


def use_ops_attention(queries: mx.array) -> bool:
    """Multi-query attention of at most MAX_OPS_QUERIES queries on MLX-CUDA (or when a test forces it)."""
    few = 1 < queries.shape[2] <= MAX_OPS_QUERIES
    if fast_paths.ops_attention is not None:
        return fast_paths.ops_attention and few
    if not fast_paths.enabled or not few:
        return False
    try:
        return bool(mx.cuda.is_available()) and mx.default_device() == mx.gpu
    except AttributeError:
        return False


def ops_attention(queries: mx.array, keys: mx.array, values: mx.array, scale: float,
                  mask: mx.array | str | None) -> mx.array:
    """queries (B, Hq, L, D); keys/values (B, Hkv, S, D); mask: None, "causal" (bottom-right
    aligned, as the fused op) or a bool (L, S) array (True = visible). Returns (B, Hq, L, D)."""
    B, Hq, L, D = queries.shape
    Hkv, S = keys.shape[1], keys.shape[2]
    groups = Hq // Hkv
    q = (queries * scale).reshape(B, Hkv, groups * L, D)          # head h = kv * groups + g
    scores = q @ keys.swapaxes(-1, -2)                            # (B, Hkv, groups * L, S)
    if isinstance(mask, str):
        mask = mx.arange(S)[None] <= (mx.arange(L)[:, None] + (S - L))
    if mask is not None:
        if groups > 1:
            mask = mx.tile(mask, (groups, 1))
        scores = mx.where(mask, scores, mx.array(-mx.inf, scores.dtype))
    weights = mx.softmax(scores, axis=-1, precise=True)
    return (weights @ values).reshape(B, Hq, L, values.shape[-1])
