"""A prompt's GatedDeltaNet recurrence in chunks, wherever mlx-lm's Metal kernel does not run (CPU, CUDA).

Off Metal, mlx-lm's `gated_delta_update` falls back to `gated_delta_ops`, a Python loop with one step per
token: most of a long prefill on the CPU (3.19 of 3.76 s of a 2,048-token prefill of the demo, timed with an
evaluation at each call), launch-bound on CUDA (one 205-token text took ~0.3 s on the H200). Here a
run of at least MIN_TOKENS tokens goes CHUNK at a time through `engines.gdn.recurrence_chain` (the verify's
unrolled form, keeping only the last state): a few matmuls per chunk instead of a step per token, equal to the
loop up to float32 rounding. Shorter runs (decode steps), a padding mask (batched decoding) and per-key gates
keep mlx-lm's loop. `install` puts it in place of the loop (ModelBundle does, once).
"""

from __future__ import annotations

import mlx.core as mx
import mlx_lm.models.gated_delta as mlx_gdn

from .gdn import recurrence_chain

CHUNK = 32        # tokens per unrolled solve (CPU, 2,048-token prefill: 16 / 32 / 64 / 128 took 2.59 / 2.56 / 2.85 / 3.36 s)
# shorter runs keep the loop: it costs them little, and keeps their arithmetic that of decode steps (a short
# prompt's state is bitwise what stepping through it gives, which the verify and commit tests compare to 1e-5)
MIN_TOKENS = 64
_LOOP = mlx_gdn.gated_delta_ops


def gated_delta_chunked(q: mx.array, k: mx.array, v: mx.array, g: mx.array, beta: mx.array,
                        state: mx.array | None = None, mask: mx.array | None = None) -> tuple[mx.array, mx.array]:
    """`gated_delta_ops` (same arguments and shapes: q, k (B, T, Hk, Dk), v (B, T, Hv, Dv), g and beta (B, T, Hv),
    state (B, Hv, Dv, Dk)), a chunk at a time."""
    B, T, Hk, Dk = q.shape
    if T < MIN_TOKENS or mask is not None or g.ndim != 3:
        return _LOOP(q, k, v, g, beta, state, mask)
    Hv, Dv = v.shape[-2:]
    if state is None:
        state = mx.zeros((B, Hv, Dv, Dk), dtype=mx.float32)
    if (repeat := Hv // Hk) > 1:
        q, k = mx.repeat(q, repeat, -2), mx.repeat(k, repeat, -2)
    f32 = [x.astype(mx.float32) for x in (q, k, v, g, beta)]
    ys, states = [], []
    for b in range(B):
        s = state[b].astype(mx.float32)
        pieces = []
        for start in range(0, T, CHUNK):
            y, s = recurrence_chain(*(x[b, start:start + CHUNK] for x in f32), s)
            pieces.append(y)
        ys.append(mx.concatenate(pieces))
        states.append(s)
    return mx.stack(ys).astype(q.dtype), mx.stack(states).astype(state.dtype)


def install() -> None:
    """mlx-lm's `gated_delta_update` calls this module's function where it called its loop (idempotent)."""
    mlx_gdn.gated_delta_ops = gated_delta_chunked
