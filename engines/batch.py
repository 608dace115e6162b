"""Continuous batching for raw decoding: requests that decode raw at the same time share one forward
per step, and join or leave the batch between steps.

Each request prefills alone (its prompt, its prefix-cache entry), then its caches are merged into
the batch's with mlx-lm's batch caches (`BatchKVCache` left-pads attention rows of different lengths;
`ArraysCache` stacks the GatedDeltaNet states), filtered out when it ends and extracted back when it
is left decoding alone, so a single stream keeps the pipelined single-row decode. mlx-lm's
`BatchGenerator` itself is not used: it owns prompt processing, sampling and stop handling, while a
row here must keep our sampler, penalties, constraint and stop/text pipeline, and must be able to
arrive mid-request from a speculative engine with its caches already filled (no re-prefill).

The worker thread interleaves requests one item at a time (gateway/worker/scheduler.py): the first
row to ask for a token in a round runs the step for every row, the others take what it produced.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import mlx.core as mx

from contracts.chat import TokenLogprob

from .bundle import ModelBundle
from .processing import TargetProcessor
from .sampling import Rng, SamplerConfig, choose


@dataclass(frozen=True)
class BatchToken:
    """One row's output of one batched step."""

    token: int
    seconds: float          # the step's wall time (shared by every row in it)
    rows: int               # rows in the step
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass(eq=False)
class BatchRow:
    """One request in the batch: the token it feeds next and what the steps produced for it."""

    pending: int
    cfg: SamplerConfig
    rng: Rng
    processor: TargetProcessor | None
    ready: deque[BatchToken] = field(default_factory=deque)

    @property
    def processed(self) -> bool:
        """Its logits depend on its own emitted tokens (penalties, a constraint) or it reports log-probs."""
        return self.processor is not None and self.processor.per_token


class DecodeBatch:
    """The raw decoding batch of one loaded target. Used from the worker thread only."""

    def __init__(self, bundle: ModelBundle, max_rows: int = 8):
        self.bundle = bundle
        self.max_rows = max_rows
        self.rows: list[BatchRow] = []
        self.cache: list | None = None
        self.streams = 0        # requests decoding raw now, batched or alone
        self.active = 0         # requests being generated now (prefilling, speculative or raw)
        self.steps = 0          # batched steps run (for metrics)
        self.row_steps = 0      # tokens produced by batched steps
        self._queued: mx.array | None = None   # the next step's tokens, in flight (pipelining)
        self._last: float | None = None         # when the previous step's tokens landed

    # -- who is here ---------------------------------------------------------------------------
    @contextmanager
    def generating(self) -> Iterator[None]:
        """Counts a request while the runtime generates it (what the speculative hand-over weighs)."""
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1

    @contextmanager
    def stream(self) -> Iterator[None]:
        """Counts a raw decoder while it runs (alone or batched)."""
        self.streams += 1
        try:
            yield
        finally:
            self.streams -= 1

    @property
    def enabled(self) -> bool:
        return self.max_rows >= 2

    def wants(self) -> bool:
        """A lone stream should join: another raw stream runs and there is room."""
        return self.enabled and self.streams >= 2 and len(self.rows) < self.max_rows

    # -- joining and leaving -------------------------------------------------------------------
    def join(self, cache: list, pending: int, cfg: SamplerConfig, rng: Rng,
             processor: TargetProcessor | None = None) -> BatchRow:
        """Adds a request whose `cache` holds everything before `pending` (not yet fed)."""
        self.drain()
        single = [type(layer).merge([layer]) for layer in cache]
        if self.cache is None:
            self.cache = single
        else:
            for mine, theirs in zip(self.cache, single):
                mine.extend(theirs)
        row = BatchRow(pending, cfg, rng, processor)
        self.rows.append(row)
        self._last = None   # the next step's time includes the join: not a step cost
        return row

    def leave(self, row: BatchRow) -> None:
        if row not in self.rows:
            return
        self.drain()
        index = self.rows.index(row)
        self.rows.pop(index)
        if not self.rows:
            self.cache = None
            self._last = None
            return
        keep = [i for i in range(len(self.rows) + 1) if i != index]
        for layer in self.cache:
            layer.filter(keep)

    def alone(self, row: BatchRow) -> bool:
        """The row is the only raw stream left and has nothing buffered: it decodes faster on its own
        caches, pipelined (a queued step is drained first; its token is buffered, so not yet)."""
        if self.streams > 1 or self.rows != [row]:
            return False
        self.drain()
        return not row.ready

    def split_off(self, row: BatchRow) -> tuple[list, int]:
        """Takes the row out with caches of its own (to decode alone): (cache, pending)."""
        self.drain()
        index = self.rows.index(row)
        cache = [layer.extract(index) for layer in self.cache]
        self.leave(row)
        return cache, row.pending

    # -- stepping ------------------------------------------------------------------------------
    def take(self, row: BatchRow) -> list[BatchToken]:
        """Every token the row has ready (from a step another row already ran this round), else the next
        step's. Usually one; two when a join or leave landed the queued step after the row had taken its
        token this round. Taking them all at once keeps such tokens from piling up: a row one token
        ahead stays ahead, and each step it is ahead computes a token past its request's end (before
        this, ~7 per request with 8 clients, 11% of the batched work on the CPU)."""
        if not row.ready:
            self._step()
        tokens = list(row.ready)
        row.ready.clear()
        return tokens

    def drain(self) -> None:
        """Lands the step queued ahead (pipelining): every row gets its token, nothing stays in flight,
        and each row's pending token is again one not yet fed (the state joins and leaves need)."""
        if self._queued is None:
            return
        queued, self._queued = self._queued, None
        self._distribute(queued.tolist(), [[] for _ in self.rows])

    def _step(self) -> None:
        """One batched step. Rows whose next logits need no host state (no penalties, constraint or
        log-probabilities) run pipelined: the following step is queued before the host reads this
        one's tokens, as a single decode does."""
        if any(r.processed for r in self.rows):
            self.drain()
            logits = self._forward(mx.array([[r.pending] for r in self.rows], dtype=mx.uint32))
            tokens, logprobs = zip(*self._choose(logits))
            self._distribute(list(tokens), list(logprobs))
            return
        if self._queued is None:   # start the pipeline from each row's pending token
            current = self._sample(self._forward(mx.array([[r.pending] for r in self.rows], dtype=mx.uint32)))
        else:
            current = self._queued
        self._queued = self._sample(self._forward(current[:, None]))
        mx.async_eval(self._queued)
        self._distribute(current.tolist(), [[] for _ in self.rows])

    def _forward(self, inputs: mx.array) -> mx.array:
        return self.bundle.model(inputs, cache=self.cache)[:, -1, :]

    def _distribute(self, tokens: list[int], logprobs: list[list[TokenLogprob]]) -> None:
        now = time.perf_counter()
        seconds = now - self._last if self._last is not None else 0.0
        self._last = now
        for row, token, lp in zip(self.rows, tokens, logprobs):
            row.pending = int(token)
            row.ready.append(BatchToken(int(token), seconds, len(self.rows), lp))
        self.steps += 1
        self.row_steps += len(self.rows)

    def _sample(self, logits: mx.array) -> mx.array:
        """(B,) tokens, lazily: one argmax when every row is greedy, else each row with its sampler
        (a processed row's entry is a placeholder: `_choose` draws it on the host, from its own rng)."""
        if all(r.cfg.greedy for r in self.rows):
            return mx.argmax(logits, axis=-1)
        return mx.concatenate([mx.argmax(logits[i : i + 1], axis=-1) if r.cfg.greedy or r.processed
                               else choose(logits[i : i + 1], r.cfg, r.rng).reshape(1)
                               for i, r in enumerate(self.rows)])

    def _choose(self, logits: mx.array) -> list[tuple[int, list[TokenLogprob]]]:
        """One token per row with the row's own sampler, penalties and constraint (on the host)."""
        plain = self._sample(logits)
        out: list[tuple[int, list[TokenLogprob]]] = []
        for i, (row, token) in enumerate(zip(self.rows, plain.tolist())):
            if row.processed:   # its logits need its own history on the host
                processed = row.processor.apply(logits[i : i + 1], [[]])
                token = int(choose(processed, row.cfg, row.rng)[0].item())
                out.append((token, row.processor.logprobs(processed, [token])))
                row.processor.advance([token])
            else:
                out.append((int(token), []))
        return out
