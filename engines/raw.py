"""Plain autoregressive decoding. `decode` is also where a speculative request lands when it hands
over to raw mid-way: it continues from any target cache plus the pending token."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial

import mlx.core as mx

from contracts.engine import CancelToken, StepResult, SwitchRule
from contracts.sampling import SamplingParams

from .batch import DecodeBatch
from .bundle import ModelBundle
from .prefill import PrefixPlan, prefill_stepwise
from .processing import TargetProcessor
from .resume import request_processor, request_rng
from .rows import READS_NOTHING
from .sampling import Rng, SamplerConfig, choose, resolve


def decode(
    bundle: ModelBundle,
    cache: list,
    pending: int,
    cfg: SamplerConfig,
    rng: Rng,
    cancel: CancelToken,
    engine: str = "raw",
    processor: TargetProcessor | None = None,
    batch: DecodeBatch | None = None,
) -> Iterator[StepResult]:
    """Feed `pending` (not yet in the cache) and decode one token per step. Alone, the steps are
    pipelined (`decode_alone`); while another request decodes raw too, the request joins the
    target's DecodeBatch and leaves it again when it is the last one there (no re-prefill either way)."""
    if batch is None or not batch.enabled:
        yield from decode_alone(bundle, cache, pending, cfg, rng, cancel, engine, processor)
        return
    with batch.stream(cache) as stream:
        joins = partial(batch.wants, stream)
        while not cancel.cancelled:
            if not joins():
                pending = yield from decode_alone(bundle, stream.cache, pending, cfg, rng, cancel, engine, processor,
                                                  until=joins)
                if pending is None:
                    return
                continue
            row = batch.join(stream, pending, cfg, rng, processor)
            try:
                while not cancel.cancelled and (row.ready or not batch.alone(row)):
                    outs = batch.take(row)
                    # several tokens span several steps: their time is not one step's (the monitor skips it)
                    yield StepResult(tokens=[o.token for o in outs], seconds=sum(o.seconds for o in outs),
                                     engine=engine, logprobs=[lp for o in outs for lp in o.logprobs],
                                     batch_rows=outs[-1].rows, interleaved=len(outs) > 1)
                if cancel.cancelled:
                    return
                pending = batch.split_off(stream)
            finally:
                batch.leave(row)


def decode_alone(
    bundle: ModelBundle, cache: list, pending: int, cfg: SamplerConfig, rng: Rng, cancel: CancelToken,
    engine: str = "raw", processor: TargetProcessor | None = None, until: Callable[[], bool] | None = None,
) -> Generator[StepResult, None, int | None]:
    """One row, pipelined: the next step's graph is queued with async_eval before the host reads
    the current token. A request whose logits depend on the previous token on the host (penalties,
    a constraint, log-probabilities) decodes one step at a time instead (`decode_each`). Stops when
    `until()` turns true and returns the token to feed next (None when cancelled)."""
    if processor is not None and processor.per_token:
        return (yield from decode_each(bundle, cache, pending, cfg, rng, cancel, engine, processor, until))

    def step(token: mx.array) -> mx.array:
        logits = bundle.model(token.reshape(1, 1), cache=cache)[:, -1, :]
        return choose(logits, cfg, rng)

    current = step(mx.array([pending], dtype=mx.uint32))
    mx.async_eval(current)
    started = time.perf_counter()
    while not cancel.cancelled:
        if until is not None and until():   # `current` is chosen but not fed: it is the next pending
            token = int(current.item())
            yield StepResult(tokens=[token], seconds=time.perf_counter() - started, engine=engine)
            return token
        following = step(current)
        mx.async_eval(following)
        token = int(current.item())
        now = time.perf_counter()
        yield StepResult(tokens=[token], seconds=now - started, engine=engine)
        started = now
        current = following
    return None


def decode_each(
    bundle: ModelBundle, cache: list, pending: int, cfg: SamplerConfig, rng: Rng, cancel: CancelToken,
    engine: str, processor: TargetProcessor, until: Callable[[], bool] | None = None,
) -> Generator[StepResult, None, int | None]:
    """One token per step, each chosen from the processed target distribution."""
    started = time.perf_counter()
    while not cancel.cancelled:
        if until is not None and until():
            return pending
        logits = processor.apply(bundle.model(mx.array([[pending]], dtype=mx.uint32), cache=cache)[:, -1, :], [[]])
        token = int(choose(logits, cfg, rng)[0].item())
        logprobs = processor.logprobs(logits, [token])
        processor.advance([token])
        now = time.perf_counter()
        yield StepResult(tokens=[token], seconds=now - started, engine=engine, logprobs=logprobs)
        started = now
        pending = token
    return None


class RawEngine:
    name = "raw"

    def __init__(self, bundle: ModelBundle):
        self.bundle = bundle

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        cancel: CancelToken,
        switch: SwitchRule | None = None,
        peers: Mapping | None = None,
        prefix: PrefixPlan | None = None,
        written: Sequence[int] = (),
    ) -> Iterator[StepResult]:
        """Plain decoding, unless the rule lets the request move to a speculative peer: then it runs
        in the one speculative loop, which probes the peers for the rule's first steps."""
        if switch is not None and switch.probe_steps > 0 and any(t in (peers or {}) for t in switch.targets):
            from .speculative import speculative_generate  # the loop builds on this module's decode

            return speculative_generate(self.bundle, dict(peers or {}), self.name, prompt_ids, params, cancel, switch,
                                        prefix=prefix, written=written)
        return self._generate(prompt_ids, params, cancel, prefix, written)

    def _generate(self, prompt_ids: Sequence[int], params: SamplingParams, cancel: CancelToken,
                  prefix: PrefixPlan | None, written: Sequence[int]) -> Iterator[StepResult]:
        cfg = resolve(params, self.bundle.generation)
        rng = request_rng(params, written)
        processor = request_processor(params, prompt_ids, written, self.bundle.tokenizer, self.bundle.vocab_size)
        ids = [*prompt_ids, *written]
        cache = self.bundle.make_cache()
        _, cached, _ = yield from prefill_stepwise(self.bundle, cache, ids[:-1], plan=prefix, reads=READS_NOTHING)
        steps = decode(self.bundle, cache, int(ids[-1]), cfg, rng, cancel, processor=processor,
                       batch=self.bundle.decode_batch)
        for index, step in enumerate(steps):
            yield replace(step, cached_tokens=cached) if index == 0 else step
