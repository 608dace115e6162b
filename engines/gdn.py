"""GatedDeltaNet over a token tree, keeping per-slot state (docs/design.md "GatedDeltaNet").

mlx-lm's GatedDeltaNet only runs causal sequences and overwrites its cache. Here each slot's conv
window and recurrence fork from its parent, and the state after every slot is kept so a commit can
pick the state at the last accepted slot — no re-forward, no rollback. The arithmetic reuses
mlx-lm's own modules and its ops-reference step so results match a sequential decode.

Paths (engines.kernels.fast_paths picks; the reference stays for tests and as the fallback):
- reference: per-level Python loop over mlx-lm's `_gated_delta_step_ops`;
- compiled: the same ops (conv windows, q/k norm, gates, the recurrence, the gated norm) traced once
  per tree layout with mx.compile, so elementwise work fuses into few kernels and the Python graph
  is built once per layout, not per verify; the recurrence runs for all slots at once
  (`recurrence_chunked`: a few batched matmuls instead of a step per tree level);
- CUDA: one launch for the whole tree recurrence (engines/kernels/gdn_tree_cuda.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.activations import precise_swiglu
from mlx_lm.models.gated_delta import _gated_delta_step_ops, compute_g, normalize_qk

from .kernels import fast_paths, gdn_tree_cuda
from .tree import DeviceTree, TreeLayout

log = logging.getLogger("switchyard.gdn")


@dataclass
class GdnSnapshot:
    """Per-slot state after processing that slot (what the cache would hold had it been last)."""

    conv: mx.array     # (T, kernel-1, C)
    state: mx.array    # (T, Hv, Dv, Dk)


@dataclass(frozen=True)
class GdnShape:
    """The module constants a GDN layer's tree step depends on (shared by all GDN layers)."""

    kernel: int
    key_dim: int
    Hk: int
    Hv: int
    Dk: int
    Dv: int
    eps: float

    @classmethod
    def of(cls, module: nn.Module) -> "GdnShape":
        return cls(module.conv_kernel_size, module.key_dim, module.num_k_heads, module.num_v_heads,
                   module.head_k_dim, module.head_v_dim, module.norm.eps)


# -- per-layout index arrays (built once per layout, not per verify) -----------------------------
@lru_cache(maxsize=256)
def conv_window_index(tree: TreeLayout, kernel: int) -> mx.array:
    return mx.array(tree.conv_windows(kernel))


@lru_cache(maxsize=256)
def parents_index(tree: TreeLayout) -> mx.array:
    return mx.array(tree.parents, dtype=mx.int32)


@lru_cache(maxsize=256)
def _level_index(tree: TreeLayout) -> tuple[mx.array | slice, ...]:
    """Per level: a slice when its slots are contiguous (cheaper than a gather), else an index."""
    out: list[mx.array | slice] = []
    for level in tree.levels:
        contiguous = list(level) == list(range(level[0], level[0] + len(level)))
        out.append(slice(level[0], level[-1] + 1) if contiguous else mx.array(level))
    return tuple(out)


# -- the recurrence ------------------------------------------------------------------------------
def recurrence_reference(q, k, v, g, beta, root_state, tree: TreeLayout) -> tuple[mx.array, mx.array]:
    """q, k: (T, Hv, Dk) (already repeated to Hv); v: (T, Hv, Dv); g, beta: (T, Hv);
    root_state: (1, Hv, Dv, Dk). One level at a time, every slot forked from its parent's state.
    Returns y (T, Hv, Dv) and per-slot states (T, Hv, Dv, Dk)."""
    T = tree.size
    states: list[mx.array | None] = [None] * T
    outputs: list[mx.array | None] = [None] * T
    for level, idx in zip(tree.levels, _level_index(tree)):
        if tree.parents[level[0]] < 0:
            parent_states = root_state
        else:
            parent_states = mx.stack([states[tree.parents[s]] for s in level])
        y, new_states = _gated_delta_step_ops(q[idx], k[idx], v[idx], g[idx], beta[idx], parent_states)
        for j, slot in enumerate(level):
            states[slot] = new_states[j]
            outputs[slot] = y[j]
    return mx.stack(outputs), mx.stack(states)


@lru_cache(maxsize=256)
def _path_masks(tree: TreeLayout) -> tuple[mx.array, mx.array]:
    """(T, T) float masks: ancestor-or-self, and strict ancestor (row = slot, column = ancestor)."""
    inclusive = tree.visibility.astype("float32")
    strict = inclusive.copy()
    strict[range(tree.size), range(tree.size)] = 0.0
    return mx.array(inclusive), mx.array(strict)


def recurrence_chunked(q, k, v, g, beta, root_state, tree: TreeLayout) -> tuple[mx.array, mx.array]:
    return recurrence_masked(q, k, v, g, beta, root_state, *_path_masks(tree))


def _solved(q, k, v, g, beta, s0, inclusive, strict):
    """What `recurrence_masked` and `recurrence_chain` share: per head (Hv first) the queries and keys, each
    slot's G_t, the decays G_t / G_j along root paths, and the d_t solved.

    Unrolled along a slot's root path P(t) (its ancestors and itself), with G_t = prod of the
    gates on P(t) and S0 the root state:
        S_t     = G_t S0 + sum_{j in P(t)} (G_t / G_j) d_j k_j^T
        d_t     = beta_t (v_t - G_t S0 k_t - sum_{j in P(t), j != t} (G_t / G_j) (k_j . k_t) d_j)
        y_t     = S_t q_t
    The d_t solve a unit lower-triangular system (I + A) D = B (parents come before children),
    and A is nilpotent, so (I + A)^-1 = (I - A)(I + A^2)(I + A^4)... exactly: a few batched
    matmuls instead of one step per tree level. Equal to the loop up to float32 rounding.
    """
    T = inclusive.shape[0]
    log_g = mx.log(mx.maximum(g, 1e-30))                       # (T, Hv); gates are in (0, 1]
    L = (inclusive @ log_g).T                                  # (Hv, T): log G_t along the root path
    gap = L[:, :, None] - L[:, None, :]                        # (Hv, T, T): log G_t / G_j
    decay = mx.exp(mx.minimum(gap, 0.0)) * inclusive            # j in P(t): G_t / G_j <= 1, else 0
    kh, qh, vh = k.transpose(1, 0, 2), q.transpose(1, 0, 2), v.transpose(1, 0, 2)   # (Hv, T, D)
    G = mx.exp(L)[:, :, None]                                   # (Hv, T, 1)
    bt = beta.T[:, :, None]                                     # (Hv, T, 1)
    A = bt * (decay * strict) * (kh @ kh.transpose(0, 2, 1))   # (Hv, T, T), strictly lower
    rhs = bt * (vh - G * (kh @ s0.transpose(0, 2, 1)))          # (Hv, T, Dv)
    if T > _DOUBLING_ROWS:   # a prefill's chunk: the powers of A would grow past float32 (see _unit_lower_inverse)
        return qh, kh, G, decay, _unit_lower_inverse(A) @ rhs
    return qh, kh, G, decay, _doubling(A, rhs)


def _doubling(A: mx.array, rhs: mx.array) -> mx.array:
    """(I + A)^-1 rhs for strictly lower (nilpotent) A of n rows: (I - A)(I + A^2)(I + A^4)... applied to rhs."""
    d, power = rhs - A @ rhs, A
    for _ in range(max(0, (A.shape[-1] - 1).bit_length() - 1)):
        power = power @ power
        d = d + power @ d
    return d


# Up to this many rows the doubling product is exact to float32 rounding even for near-parallel keys (1e-6 at 8
# rows; up to 2e-4 at 16, ~1 at 32 and overflow at 64 on keys 0.01-0.3 apart: the powers of A grow, though
# (I + A)^-1 stays bounded, being built from the delta rule's contractions)
_DOUBLING_ROWS = 8


def _unit_lower_inverse(A: mx.array) -> mx.array:
    """(I + A)^-1 for strictly lower A (..., n, n), by halves: [[X11, 0], [-X22 A21 X11, X22]], each diagonal
    block of at most _DOUBLING_ROWS rows by the doubling product. Every intermediate is a block of the inverse
    itself, so nothing grows."""
    n = A.shape[-1]
    if n <= _DOUBLING_ROWS:
        return _doubling(A, mx.eye(n, dtype=A.dtype))
    h = n // 2
    X11, X22 = _unit_lower_inverse(A[..., :h, :h]), _unit_lower_inverse(A[..., h:, h:])
    X21 = -(X22 @ A[..., h:, :h]) @ X11
    top = mx.concatenate([X11, mx.zeros((*A.shape[:-2], h, n - h), dtype=A.dtype)], axis=-1)
    return mx.concatenate([top, mx.concatenate([X21, X22], axis=-1)], axis=-2)


def _outputs(qh, kh, G, decay, d, s0):
    """y_t = G_t S0 q_t + sum_j decay[t, j] (q_t . k_j) d_j, as (T, Hv, Dv)."""
    y = G * (qh @ s0.transpose(0, 2, 1)) + (decay * (qh @ kh.transpose(0, 2, 1))) @ d      # (Hv, T, Dv)
    return y.transpose(1, 0, 2)


def recurrence_masked(q, k, v, g, beta, root_state, inclusive, strict) -> tuple[mx.array, mx.array]:
    """The same recurrence as `recurrence_reference`, for every slot at once (no loop over levels); every
    slot's state too (what a commit picks from). See `_solved`."""
    s0 = root_state[0]                                          # (Hv, Dv, Dk)
    qh, kh, G, decay, d = _solved(q, k, v, g, beta, s0, inclusive, strict)
    # every slot's state: G_t S0 + sum_j decay[t, j] d_j k_j^T
    states = G[..., None] * s0[:, None] + (decay[..., None] * d[:, None, :, :]).transpose(0, 1, 3, 2) @ kh[:, None]
    return _outputs(qh, kh, G, decay, d, s0), states.transpose(1, 0, 2, 3)


@lru_cache(maxsize=8)
def _chain_masks(T: int) -> tuple[mx.array, mx.array]:
    inclusive = mx.tril(mx.ones((T, T), dtype=mx.float32))
    return inclusive, inclusive - mx.eye(T, dtype=mx.float32)


def recurrence_chain(q, k, v, g, beta, s0) -> tuple[mx.array, mx.array]:
    """A causal run of T tokens at once (a prefill's chunk): q, k (T, Hv, Dk), v (T, Hv, Dv), g, beta (T, Hv),
    s0 (Hv, Dv, Dk). Returns y (T, Hv, Dv) and the state after the last token only (Hv, Dv, Dk), which is
    all a prefill carries on: S_T = G_T S0 + sum_j (G_T / G_j) d_j k_j^T."""
    qh, kh, G, decay, d = _solved(q, k, v, g, beta, s0, *_chain_masks(q.shape[0]))
    last = G[:, -1, :, None] * s0 + (decay[:, -1, :, None] * d).transpose(0, 2, 1) @ kh
    return _outputs(qh, kh, G, decay, d, s0), last


def _prepare(shape: GdnShape, qkv, b, a, conv_state, windows, conv_weight, A_log, dt_bias):
    """Conv windows forked along the tree, q/k/v, gates. qkv: (T, C); conv_state: (1, kernel-1, C)."""
    T = qkv.shape[0]
    rows = mx.concatenate([conv_state[0], qkv], axis=0)
    window_rows = rows[windows]                                               # (T, kernel, C)
    conv_out = nn.silu(mx.conv1d(window_rows, conv_weight, groups=qkv.shape[-1]))[:, 0, :]
    q, k, v = mx.split(conv_out, [shape.key_dim, 2 * shape.key_dim], axis=-1)
    q = q.reshape(T, shape.Hk, shape.Dk)
    k = k.reshape(T, shape.Hk, shape.Dk)
    v = v.reshape(T, shape.Hv, shape.Dv)
    q, k = normalize_qk(q, k, inv_scale=shape.Dk**-0.5, eps=1e-6)
    return q, k, v, mx.sigmoid(b), compute_g(A_log, a, dt_bias), window_rows[:, 1:, :]


def _repeat_heads(shape: GdnShape, q, k):
    if shape.Hv // shape.Hk > 1:
        q = mx.repeat(q, shape.Hv // shape.Hk, axis=-2)
        k = mx.repeat(k, shape.Hv // shape.Hk, axis=-2)
    return q, k


def _gated_norm(shape: GdnShape, y, z, norm_weight):
    """mlx-lm's RMSNormGated: rms_norm(y) * silu(z) in float32, back to y's dtype."""
    return precise_swiglu(y, z, mx.fast.rms_norm(y, norm_weight, shape.eps))


@lru_cache(maxsize=128)
def _compiled_ops(shape: GdnShape, tree: TreeLayout, chunked: bool = True):
    """Everything between the input projections and out_proj, traced once for this layout."""
    recurrence = recurrence_chunked if chunked else recurrence_reference

    def run(qkv, z, b, a, conv_state, root_state, windows, conv_weight, A_log, dt_bias, norm_weight):
        q, k, v, beta, g, conv = _prepare(shape, qkv, b, a, conv_state, windows, conv_weight, A_log, dt_bias)
        q, k = _repeat_heads(shape, q, k)
        y, states = recurrence(q, k, v, g, beta, root_state, tree)
        return _gated_norm(shape, y, z, norm_weight), conv, states

    return mx.compile(run)


@lru_cache(maxsize=16)
def _compiled_data_ops(shape: GdnShape):
    """`_compiled_ops` for a tree given as device data (DeviceTree without a layout): one trace per
    tree size serves every tree of that size."""

    def run(qkv, z, b, a, conv_state, root_state, windows, inclusive, strict, conv_weight, A_log, dt_bias, norm_weight):
        q, k, v, beta, g, conv = _prepare(shape, qkv, b, a, conv_state, windows, conv_weight, A_log, dt_bias)
        q, k = _repeat_heads(shape, q, k)
        y, states = recurrence_masked(q, k, v, g, beta, root_state, inclusive, strict)
        return _gated_norm(shape, y, z, norm_weight), conv, states

    return mx.compile(run)


@lru_cache(maxsize=16)
def _compiled_prepare(shape: GdnShape):
    return mx.compile(lambda *args: _prepare(shape, *args))


@lru_cache(maxsize=16)
def _compiled_norm(shape: GdnShape):
    return mx.compile(lambda y, z, w: _gated_norm(shape, y, z, w))


def _cuda_kernel_ok(shape: GdnShape) -> bool:
    """Use the CUDA kernel where it runs; checked once against the reference (fp32, 1e-5) so a
    kernel that fails to build or disagrees turns itself off and the compiled ops path takes over."""
    if not (fast_paths.cuda_kernel and gdn_tree_cuda.available() and gdn_tree_cuda.supports_head_dim(shape.Dk)):
        return False
    return gdn_tree_cuda.self_check(shape.Hk, shape.Hv, shape.Dk, shape.Dv, recurrence_reference)


def gdn_tree(module: nn.Module, x: mx.array, cache, tree: TreeLayout | DeviceTree) -> tuple[mx.array, GdnSnapshot]:
    """x: (1, T, D) normed inputs in slot order. Leaves `cache` untouched."""
    if isinstance(tree, DeviceTree):
        if tree.layout is None:
            return _gdn_data_tree(module, x, cache, tree)
        tree = tree.layout
    _, T, _ = x.shape
    shape = GdnShape.of(module)
    qkv = module.in_proj_qkv(x)[0]
    z = module.in_proj_z(x).reshape(T, shape.Hv, shape.Dv)
    b = module.in_proj_b(x)[0]
    a = module.in_proj_a(x)[0]
    conv_state = cache[0] if cache[0] is not None else mx.zeros((1, shape.kernel - 1, module.conv_dim), x.dtype)
    root_state = cache[1] if cache[1] is not None else mx.zeros((1, shape.Hv, shape.Dv, shape.Dk), mx.float32)
    windows = conv_window_index(tree, shape.kernel)
    weights = (module.conv1d.weight, module.A_log, module.dt_bias)

    if not fast_paths.enabled:
        q, k, v, beta, g, conv = _prepare(shape, qkv, b, a, conv_state, windows, *weights)
        q, k = _repeat_heads(shape, q, k)
        y, states = recurrence_reference(q, k, v, g, beta, root_state, tree)
        y = module.norm(y, z)
    elif root_state.dtype == mx.float32 and _cuda_kernel_ok(shape):
        q, k, v, beta, g, conv = _compiled_prepare(shape)(qkv, b, a, conv_state, windows, *weights)
        y, states = gdn_tree_cuda.gdn_tree_cuda(q, k, v, g, beta, root_state[0], parents_index(tree))
        y = _compiled_norm(shape)(y, z, module.norm.weight)
    else:
        y, conv, states = _compiled_ops(shape, tree, fast_paths.chunked_gdn)(
            qkv, z, b, a, conv_state, root_state, windows, *weights, module.norm.weight)
    out = module.out_proj(y.reshape(1, T, -1))
    return out, GdnSnapshot(conv=conv, state=states)


def _inputs(module: nn.Module, x: mx.array, cache):
    _, T, _ = x.shape
    shape = GdnShape.of(module)
    qkv = module.in_proj_qkv(x)[0]
    z = module.in_proj_z(x).reshape(T, shape.Hv, shape.Dv)
    b = module.in_proj_b(x)[0]
    a = module.in_proj_a(x)[0]
    conv_state = cache[0] if cache[0] is not None else mx.zeros((1, shape.kernel - 1, module.conv_dim), x.dtype)
    root_state = cache[1] if cache[1] is not None else mx.zeros((1, shape.Hv, shape.Dv, shape.Dk), mx.float32)
    return shape, qkv, z, b, a, conv_state, root_state


def _gdn_data_tree(module: nn.Module, x: mx.array, cache, tree: DeviceTree) -> tuple[mx.array, GdnSnapshot]:
    """`gdn_tree` for a structure known only on the device: conv windows and path masks are inputs."""
    _, T, _ = x.shape
    shape, qkv, z, b, a, conv_state, root_state = _inputs(module, x, cache)
    weights = (module.conv1d.weight, module.A_log, module.dt_bias)
    inclusive, strict = tree.inclusive, tree.strict
    if inclusive is None:   # a tree built by hand (tests)
        inclusive = tree.visibility.astype(mx.float32)
        strict = inclusive * (1.0 - mx.eye(T, dtype=mx.float32))
    if fast_paths.enabled and root_state.dtype == mx.float32 and _cuda_kernel_ok(shape):
        q, k, v, beta, g, conv = _compiled_prepare(shape)(qkv, b, a, conv_state, tree.windows, *weights)
        y, states = gdn_tree_cuda.gdn_tree_cuda(q, k, v, g, beta, root_state[0], tree.parents)
        y = _compiled_norm(shape)(y, z, module.norm.weight)
    elif fast_paths.enabled:
        y, conv, states = _compiled_data_ops(shape)(qkv, z, b, a, conv_state, root_state, tree.windows, inclusive,
                                                    strict, *weights, module.norm.weight)
    else:
        q, k, v, beta, g, conv = _prepare(shape, qkv, b, a, conv_state, tree.windows, *weights)
        q, k = _repeat_heads(shape, q, k)
        y, states = recurrence_masked(q, k, v, g, beta, root_state, inclusive, strict)
        y = module.norm(y, z)
    out = module.out_proj(y.reshape(1, T, -1))
    return out, GdnSnapshot(conv=conv, state=states)


def restore_at(cache, snapshot: GdnSnapshot, slot: mx.array) -> None:
    """`restore` with the slot on the device (the pipelined cycle never reads it on the host)."""
    index = slot.reshape(1)
    cache[0] = mx.take(snapshot.conv, index, axis=0)
    cache[1] = mx.take(snapshot.state, index, axis=0)


def restore(cache, snapshot: GdnSnapshot, slot: int) -> None:
    """Set a GDN cache to the state after `slot` (the last accepted one)."""
    cache[0] = snapshot.conv[slot][None]
    cache[1] = snapshot.state[slot][None]
