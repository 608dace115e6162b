"""The one prefill: run prompt tokens through the target into its caches, in bounded chunks.

Long prompts run in pieces of PREFILL_CHUNK rows, each evaluated before the next, so peak memory
stays bounded (as mlx-lm's generate_step does). Every engine prefills here; the MTP head fills its
own cache over the same chunks (`chunk_slices`).
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx

from .bundle import ModelBundle
from .target import ForwardOutput, forward_causal

PREFILL_CHUNK = 2048


def chunk_slices(length: int, *, last_alone: bool = False, size: int = PREFILL_CHUNK) -> list[slice]:
    """Row slices of at most `size` covering [0, length). With `last_alone` the final row gets a
    slice of its own, so its logits come from a one-row forward exactly like a decode step's."""
    end = length - 1 if last_alone and length > 0 else length
    slices = [slice(start, min(start + size, end)) for start in range(0, end, size)]
    if end < length:
        slices.append(slice(end, length))
    return slices


def prefill(
    bundle: ModelBundle, cache: list, tokens: Sequence[int], capture: tuple[int, ...] = (), last_alone: bool = False
) -> ForwardOutput | None:
    """Append `tokens` to `cache`. Returns every row's final hidden state and the outputs of the
    `capture` layers (None when `tokens` is empty)."""
    ids = mx.array([int(t) for t in tokens], dtype=mx.uint32)
    parts: list[ForwardOutput] = []
    for rows in chunk_slices(len(tokens), last_alone=last_alone):
        parts.append(forward_causal(bundle, ids[rows], cache, capture))
        mx.eval(parts[-1].hidden, [c.state for c in cache])
    if not parts:
        return None
    return ForwardOutput(
        hidden=mx.concatenate([p.hidden for p in parts]),
        layer_outputs={i: mx.concatenate([p.layer_outputs[i] for p in parts]) for i in capture},
    )
