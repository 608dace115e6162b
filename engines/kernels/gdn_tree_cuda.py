"""One-launch GatedDeltaNet recurrence over a token tree for MLX's CUDA backend.

The ops reference (engines/gdn.py) runs one level of the tree at a time, several kernels per level.
This kernel runs every slot of a verify in ONE launch: a warp owns one value row (head hv, row dv)
of the (Dv, Dk) state, each lane Dk/32 of its columns, and walks the slots in slot order. Parents
come before children (TreeLayout's invariant), so a slot forks from its parent's state, which the
same lanes wrote earlier into the per-slot state output: no cross-thread dependency, no barrier.
A chain (parent = previous slot) keeps the state in registers.

Math per slot (fp32, as mlx-lm's `_gated_delta_step_ops`):
    S <- g * S;  kv = S k;  delta = (v - kv) * beta;  S <- S + delta k^T;  y = S q
"""

from __future__ import annotations

import logging

import mlx.core as mx

log = logging.getLogger("switchyard.kernels")

_SOURCE = r"""
    constexpr int per_lane = Dk / 32;
    const int lane = threadIdx.x;
    const int dv = blockIdx.y * blockDim.y + threadIdx.y;
    const int hv = blockIdx.z;
    if (dv >= Dv) return;  // whole warps leave together: a warp is one (hv, dv) row
    const int hk = hv / (Hv / Hk);

    const float* root = state_in + ((size_t)hv * Dv + dv) * Dk + lane * per_lane;
    float s[per_lane];
    #pragma unroll
    for (int i = 0; i < per_lane; ++i) s[i] = root[i];

    int held = -1;  // slot whose state is in registers (-1: the root state)
    for (int t = 0; t < T; ++t) {
      const int p = parents[t];
      if (p != held) {  // fork: reload the parent's state (written by these lanes before)
        const float* src = p < 0 ? root : states + (((size_t)p * Hv + hv) * Dv + dv) * Dk + lane * per_lane;
        #pragma unroll
        for (int i = 0; i < per_lane; ++i) s[i] = src[i];
      }
      const InT* kt = k + ((size_t)t * Hk + hk) * Dk + lane * per_lane;
      const InT* qt = q + ((size_t)t * Hk + hk) * Dk + lane * per_lane;
      const float gt = static_cast<float>(g[t * Hv + hv]);
      const float bt = static_cast<float>(beta[t * Hv + hv]);

      float kv = 0.0f;
      #pragma unroll
      for (int i = 0; i < per_lane; ++i) {
        s[i] = s[i] * gt;
        kv += s[i] * static_cast<float>(kt[i]);
      }
      #pragma unroll
      for (int o = 16; o > 0; o >>= 1) kv += __shfl_xor_sync(0xffffffff, kv, o);

      const float delta = (static_cast<float>(v[((size_t)t * Hv + hv) * Dv + dv]) - kv) * bt;
      float out = 0.0f;
      #pragma unroll
      for (int i = 0; i < per_lane; ++i) {
        s[i] = s[i] + static_cast<float>(kt[i]) * delta;
        out += s[i] * static_cast<float>(qt[i]);
      }
      #pragma unroll
      for (int o = 16; o > 0; o >>= 1) out += __shfl_xor_sync(0xffffffff, out, o);

      if (lane == 0) y[((size_t)t * Hv + hv) * Dv + dv] = static_cast<InT>(out);
      float* dst = states + (((size_t)t * Hv + hv) * Dv + dv) * Dk + lane * per_lane;
      #pragma unroll
      for (int i = 0; i < per_lane; ++i) dst[i] = s[i];
      held = t;
    }
"""

_kernel = None
_ROWS_PER_BLOCK = 4


def available() -> bool:
    """True where the kernel can run: MLX's CUDA backend with the GPU as default device."""
    try:
        return bool(mx.cuda.is_available()) and mx.default_device() == mx.gpu
    except AttributeError:
        return False


def supports_head_dim(Dk: int) -> bool:
    """A warp splits a state row's Dk columns over its 32 lanes."""
    return Dk % 32 == 0


def gdn_tree_cuda(
    q: mx.array, k: mx.array, v: mx.array, g: mx.array, beta: mx.array, root_state: mx.array, parents: mx.array
) -> tuple[mx.array, mx.array]:
    """q, k: (T, Hk, Dk) (NOT repeated to Hv heads); v: (T, Hv, Dv); g, beta: (T, Hv);
    root_state: (Hv, Dv, Dk) float32; parents: (T,) int32 with parents[0] = -1.
    Returns y (T, Hv, Dv) in q's dtype and the per-slot states (T, Hv, Dv, Dk) float32."""
    global _kernel
    if _kernel is None:
        _kernel = mx.fast.cuda_kernel(
            name="switchyard_gdn_tree",
            input_names=["q", "k", "v", "g", "beta", "state_in", "parents"],
            output_names=["y", "states"],
            source=_SOURCE,
        )
    T, Hk, Dk = k.shape
    Hv, Dv = v.shape[1:]
    y, states = _kernel(
        inputs=[q, k, v, g, beta, root_state, parents],
        template=[("InT", q.dtype), ("T", T), ("Hk", Hk), ("Hv", Hv), ("Dk", Dk), ("Dv", Dv)],
        grid=(32, Dv, Hv),
        threadgroup=(32, _ROWS_PER_BLOCK, 1),
        output_shapes=[(T, Hv, Dv), (T, Hv, Dv, Dk)],
        output_dtypes=[q.dtype, mx.float32],
    )
    return y, states


_checked: dict[tuple[int, int, int, int], bool] = {}
SELF_CHECK_TREE = (-1, 0, 0, 1, 2, 1, 5)   # forks and a chain, slot order != depth order
SELF_CHECK_TOLERANCE = 1e-5


def self_check(Hk: int, Hv: int, Dk: int, Dv: int, reference) -> bool:
    """Run the kernel once per head shape in float32 on random inputs and compare with the ops
    reference; a build error or a mismatch turns the kernel off for that shape (logged)."""
    key = (Hk, Hv, Dk, Dv)
    if key not in _checked:
        try:
            error = compare_with_reference(Hk, Hv, Dk, Dv, reference, SELF_CHECK_TREE)
            _checked[key] = error <= SELF_CHECK_TOLERANCE
            if not _checked[key]:
                log.warning("CUDA tree-GDN kernel off for %s: max error %.3g vs the ops reference", key, error)
        except Exception as exc:  # a kernel that does not build must not take the engine down
            log.warning("CUDA tree-GDN kernel off for %s: %s", key, exc)
            _checked[key] = False
    return _checked[key]


def compare_with_reference(Hk: int, Hv: int, Dk: int, Dv: int, reference, parents, seed: int = 0) -> float:
    """Max abs difference (y and per-slot states) between the kernel and `reference` in float32."""
    from ..tree import TreeLayout

    tree = TreeLayout.from_parents(list(parents))
    T = tree.size
    key = mx.random.key(seed)
    kq, kk, kv, kg, kb, ks = mx.random.split(key, 6)
    q = mx.random.normal((T, Hk, Dk), key=kq) * Dk**-0.5
    k = mx.random.normal((T, Hk, Dk), key=kk) * Dk**-0.5
    v = mx.random.normal((T, Hv, Dv), key=kv)
    g = mx.random.uniform(0.5, 1.0, (T, Hv), key=kg)
    beta = mx.random.uniform(0.0, 1.0, (T, Hv), key=kb)
    root = mx.random.normal((Hv, Dv, Dk), key=ks) * 0.1
    y, states = gdn_tree_cuda(q, k, v, g, beta, root, mx.array(tree.parents, dtype=mx.int32))
    rep = Hv // Hk
    y_ref, states_ref = reference(mx.repeat(q, rep, axis=-2), mx.repeat(k, rep, axis=-2), v, g, beta, root[None], tree)
    error = mx.maximum(mx.abs(y - y_ref).max(), mx.abs(states - states_ref).max())
    return float(error.item())
