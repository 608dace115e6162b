"""The one speculative decode loop (MTP and DDTree supply only their cycle) and the chain verify rule."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol, Sequence

import mlx.core as mx

from contracts.engine import CancelToken, FallbackRule, StepResult
from contracts.sampling import SamplingParams

from .bundle import ModelBundle
from .fallback import FallbackWatch
from .prefill import prefill
from .raw import decode
from .sampling import Rng, SamplerConfig, choose, log_probs, resolve
from .target import ForwardOutput


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


@dataclass
class Cycle:
    """What one draft + verify + commit cycle produced."""

    emitted: list[int]                 # accepted draft tokens, then the bonus token
    drafted: int
    accepted: int
    accepted_positions: list[bool] = field(default_factory=list)


class Drafting(Protocol):
    """A request's speculative state after prefill; `cycle` feeds the pending token (not yet in
    the target caches) and returns what the cycle emitted — its last token is the next pending."""

    def cycle(self, pending: int) -> Cycle: ...


# (target caches, prefill output, lazy first token, sampler, rng) -> the request's drafting state
StartDrafting = Callable[[list, ForwardOutput, mx.array, SamplerConfig, Rng], Drafting]


def speculative_generate(
    name: str,
    bundle: ModelBundle,
    prompt_ids: Sequence[int],
    params: SamplingParams,
    cancel: CancelToken,
    fallback: FallbackRule | None,
    start: StartDrafting,
    capture: tuple[int, ...] = (),
) -> Iterator[StepResult]:
    """The one speculative decode loop: prefill, first token, then cycles until cancelled; hands
    the rest to raw's decode on the same caches when the fallback rule trips."""
    cfg = resolve(params, bundle.generation)
    rng = Rng(params.seed)
    cache = bundle.make_cache()
    started = time.perf_counter()

    # the last prompt row alone, so the first token's logits are computed exactly as raw computes them
    prefilled = prefill(bundle, cache, prompt_ids, capture, last_alone=True)
    first = choose(bundle.lm_head(prefilled.hidden[-1:]), cfg, rng)
    drafting = start(cache, prefilled, first, cfg, rng)
    pending = int(first.item())
    now = time.perf_counter()
    yield StepResult(tokens=[pending], seconds=now - started, engine=name)
    started = now

    watch = FallbackWatch(fallback)
    while not cancel.cancelled:
        if watch.tripped:
            yield from decode(bundle, cache, pending, cfg, rng, cancel, engine="raw")
            return
        cycle = drafting.cycle(pending)
        now = time.perf_counter()
        yield StepResult(
            tokens=cycle.emitted, drafted=cycle.drafted, accepted=cycle.accepted, seconds=now - started,
            engine=name, accepted_positions=cycle.accepted_positions,
        )
        started = now
        pending = cycle.emitted[-1]
        watch.record(cycle.accepted)
