"""Pieces shared by the speculative engines: prefill that keeps hidden states, and the chain verify rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import mlx.core as mx

from .bundle import ModelBundle
from .raw import PREFILL_CHUNK
from .sampling import Rng, SamplerConfig, log_probs
from .target import ForwardOutput, forward_causal


def prefill_capture(
    bundle: ModelBundle, cache: list, prompt_ids: Sequence[int], capture: tuple[int, ...] = ()
) -> ForwardOutput:
    """Prefill like raw (all but the last token in chunks, then the last one alone, so the first
    token's logits are computed exactly as raw computes them), keeping every row's hidden states."""
    ids = mx.array([int(t) for t in prompt_ids], dtype=mx.uint32)
    bounds = list(range(0, len(prompt_ids) - 1, PREFILL_CHUNK)) + [len(prompt_ids) - 1, len(prompt_ids)]
    parts: list[ForwardOutput] = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        if stop > start:
            parts.append(forward_causal(bundle, ids[start:stop], cache, capture))
            mx.eval(parts[-1].hidden, [c.state for c in cache])
    return ForwardOutput(
        hidden=mx.concatenate([p.hidden for p in parts]),
        layer_outputs={i: mx.concatenate([p.layer_outputs[i] for p in parts]) for i in capture},
    )


@dataclass
class ChainVerdict:
    """Lazy result of verifying one drafted token (all arrays; read them with one host sync)."""

    accepted: mx.array   # bool scalar
    bonus: mx.array      # token emitted after the accepted prefix


def verify_one(
    draft: mx.array,
    draft_logprobs: mx.array | None,
    target_logits: mx.array,
    cfg: SamplerConfig,
    rng: Rng,
) -> ChainVerdict:
    """Verify one draft token d against target logits for [pos of d, pos after d].

    Shapes: draft (...), draft_logprobs (..., V), target_logits (..., 2, V); leading axes batch
    independent verifies. Greedy: accept iff d is the target's argmax; the bonus is the target's
    argmax where the chain stops. Sampled: accept with min(1, p(d)/q(d)), else draw from
    normalize(max(p - q, 0)); p and q come from the same sampler settings, so the output has the
    target's distribution.
    """
    if cfg.greedy:
        choice = mx.argmax(target_logits, axis=-1)
        accepted = choice[..., 0] == draft
        return ChainVerdict(accepted, mx.where(accepted, choice[..., 1], choice[..., 0]))
    p = mx.exp(log_probs(target_logits, cfg))
    q = mx.exp(draft_logprobs)
    index = draft[..., None].astype(mx.int32)
    q_draft = mx.take_along_axis(q, index, axis=-1)[..., 0]
    p_draft = mx.take_along_axis(p[..., 0, :], index, axis=-1)[..., 0]
    accepted = rng.uniform(draft.shape) * q_draft < p_draft
    residual = mx.maximum(p[..., 0, :] - q, 0.0)
    total = residual.sum(axis=-1, keepdims=True)
    residual = mx.where(total > 0, residual / mx.maximum(total, 1e-30), p[..., 0, :])
    rejected_bonus = rng.categorical(mx.log(residual))
    accepted_bonus = rng.categorical(mx.log(p[..., 1, :]))
    return ChainVerdict(accepted, mx.where(accepted, accepted_bonus, rejected_bonus))
