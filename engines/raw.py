"""Plain autoregressive decoding. `decode` is also where speculative engines hand a request over
(mid-request fallback): it continues from any target cache plus the pending token."""

from __future__ import annotations

import time
from typing import Iterator, Sequence

import mlx.core as mx

from .bundle import ModelBundle
from .sampling import Rng, SamplerConfig, choose, resolve
from .types import CancelToken, FallbackRule, SamplingParams, StepResult

PREFILL_CHUNK = 2048


def prefill(bundle: ModelBundle, cache: list, tokens: Sequence[int], chunk: int = PREFILL_CHUNK) -> None:
    """Run `tokens` through the target into `cache` (chunked like mlx-lm's generate_step)."""
    ids = mx.array([int(t) for t in tokens], dtype=mx.uint32)
    for start in range(0, len(tokens), chunk):
        bundle.model(ids[None, start : start + chunk], cache=cache)
        mx.eval([c.state for c in cache])


def decode(
    bundle: ModelBundle,
    cache: list,
    pending: int,
    cfg: SamplerConfig,
    rng: Rng,
    cancel: CancelToken,
    engine: str = "raw",
) -> Iterator[StepResult]:
    """Feed `pending` (not yet in the cache) and decode one token per step, pipelined: the next
    step's graph is queued with async_eval before the host reads the current token."""

    def step(token: mx.array) -> mx.array:
        logits = bundle.model(token.reshape(1, 1), cache=cache)[:, -1, :]
        return choose(logits, cfg, rng)

    current = step(mx.array([pending], dtype=mx.uint32))
    mx.async_eval(current)
    started = time.perf_counter()
    while not cancel.cancelled:
        following = step(current)
        mx.async_eval(following)
        token = int(current.item())
        now = time.perf_counter()
        yield StepResult(tokens=[token], seconds=now - started, engine=engine)
        started = now
        current = following


class RawEngine:
    name = "raw"

    def __init__(self, bundle: ModelBundle):
        self.bundle = bundle

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        cancel: CancelToken,
        fallback: FallbackRule | None = None,  # raw is what every hand-off lands on: nothing to do
    ) -> Iterator[StepResult]:
        cfg = resolve(params, self.bundle.generation)
        rng = Rng(params.seed)
        cache = self.bundle.make_cache()
        prefill(self.bundle, cache, prompt_ids[:-1])
        yield from decode(self.bundle, cache, int(prompt_ids[-1]), cfg, rng, cancel)
