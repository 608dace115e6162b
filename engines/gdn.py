"""GatedDeltaNet over a token tree, keeping per-slot state (DESIGN.md "GatedDeltaNet").

mlx-lm's GatedDeltaNet only runs causal sequences and overwrites its cache. Here each slot's conv
window and recurrence fork from its parent, and the state after every slot is kept so a commit can
pick the state at the last accepted slot — no re-forward, no rollback. The arithmetic reuses
mlx-lm's own modules and its ops-reference step so results match a sequential decode.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.gated_delta import _gated_delta_step_ops, compute_g, normalize_qk

from .tree import TreeLayout


@dataclass
class GdnSnapshot:
    """Per-slot state after processing that slot (what the cache would hold had it been last)."""

    conv: mx.array     # (T, kernel-1, C)
    state: mx.array    # (T, Hv, Dv, Dk)


def gdn_tree(module: nn.Module, x: mx.array, cache, tree: TreeLayout) -> tuple[mx.array, GdnSnapshot]:
    """x: (1, T, D) normed inputs in slot order. Leaves `cache` untouched."""
    _, T, _ = x.shape
    kernel = module.conv_kernel_size
    Hk, Hv, Dk, Dv = module.num_k_heads, module.num_v_heads, module.head_k_dim, module.head_v_dim

    qkv = module.in_proj_qkv(x)[0]
    z = module.in_proj_z(x).reshape(1, T, Hv, Dv)
    b = module.in_proj_b(x)[0]
    a = module.in_proj_a(x)[0]

    conv_state = cache[0] if cache[0] is not None else mx.zeros((1, kernel - 1, module.conv_dim), x.dtype)
    rows = mx.concatenate([conv_state[0], qkv], axis=0)
    windows = rows[mx.array(tree.conv_windows(kernel))]          # (T, kernel, C)
    conv_out = nn.silu(module.conv1d(windows))[:, 0, :]          # (T, C)

    q, k, v = mx.split(conv_out, [module.key_dim, 2 * module.key_dim], axis=-1)
    q = q.reshape(T, Hk, Dk)
    k = k.reshape(T, Hk, Dk)
    v = v.reshape(T, Hv, Dv)
    q, k = normalize_qk(q, k, inv_scale=Dk**-0.5, eps=1e-6)
    if Hv // Hk > 1:
        q = mx.repeat(q, Hv // Hk, axis=-2)
        k = mx.repeat(k, Hv // Hk, axis=-2)
    beta = mx.sigmoid(b)
    g = compute_g(module.A_log, a, module.dt_bias)

    root_state = cache[1] if cache[1] is not None else mx.zeros((1, Hv, Dv, Dk), mx.float32)
    states: list[mx.array | None] = [None] * T
    outputs: list[mx.array | None] = [None] * T
    for level in tree.levels:
        idx = mx.array(level)
        if tree.parents[level[0]] < 0:
            parent_states = root_state
        else:
            parent_states = mx.stack([states[tree.parents[s]] for s in level])
        y, new_states = _gated_delta_step_ops(q[idx], k[idx], v[idx], g[idx], beta[idx], parent_states)
        for j, slot in enumerate(level):
            states[slot] = new_states[j]
            outputs[slot] = y[j]

    y = mx.stack(outputs)[None]                                  # (1, T, Hv, Dv)
    out = module.out_proj(module.norm(y, z).reshape(1, T, -1))
    return out, GdnSnapshot(conv=windows[:, 1:, :], state=mx.stack(states))


def restore(cache, snapshot: GdnSnapshot, slot: int) -> None:
    """Set a GDN cache to the state after `slot` (the last accepted one)."""
    cache[0] = snapshot.conv[slot][None]
    cache[1] = snapshot.state[slot][None]
