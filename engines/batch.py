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
        return self.processor is not None and (self.processor.active or bool(self.processor.params.logprobs))


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

    def wants(self, row: BatchRow | None = None) -> bool:
        """A lone stream should join: another raw stream runs and there is room."""
        return self.enabled and self.streams >= 2 and len(self.rows) < self.max_rows

    def alone(self, row: BatchRow) -> bool:
        """The row is the only raw stream left: it decodes faster on its own caches, pipelined."""
        return self.streams <= 1 and self.rows == [row]

    # -- joining and leaving -------------------------------------------------------------------
    def join(self, cache: list, pending: int, cfg: SamplerConfig, rng: Rng,
             processor: TargetProcessor | None = None) -> BatchRow:
        """Adds a request whose `cache` holds everything before `pending` (not yet fed)."""
        single = [type(layer).merge([layer]) for layer in cache]
        if self.cache is None:
            self.cache = single
        else:
            for mine, theirs in zip(self.cache, single):
                mine.extend(theirs)
        row = BatchRow(pending, cfg, rng, processor)
        self.rows.append(row)
        return row

    def leave(self, row: BatchRow) -> None:
        if row not in self.rows:
            return
        index = self.rows.index(row)
        self.rows.pop(index)
        if not self.rows:
            self.cache = None
            return
        keep = [i for i in range(len(self.rows) + 1) if i != index]
        for layer in self.cache:
            layer.filter(keep)

    def split_off(self, row: BatchRow) -> tuple[list, int]:
        """Takes the row out with caches of its own (to decode alone): (cache, pending)."""
        index = self.rows.index(row)
        cache = [layer.extract(index) for layer in self.cache]
        self.leave(row)
        return cache, row.pending

    # -- stepping ------------------------------------------------------------------------------
    def take(self, row: BatchRow) -> BatchToken:
        """The row's next token: from a step another row already ran this round, or from a new step."""
        if not row.ready:
            self._step()
        return row.ready.popleft()

    def _step(self) -> None:
        started = time.perf_counter()
        inputs = mx.array([[r.pending] for r in self.rows], dtype=mx.uint32)
        logits = self.bundle.model(inputs, cache=self.cache)[:, -1, :]
        tokens = self._choose(logits)
        seconds = time.perf_counter() - started
        for row, (token, logprobs) in zip(self.rows, tokens):
            row.pending = token
            row.ready.append(BatchToken(token, seconds, len(self.rows), logprobs))
        self.steps += 1
        self.row_steps += len(self.rows)

    def _choose(self, logits: mx.array) -> list[tuple[int, list[TokenLogprob]]]:
        """One token per row with the row's own sampler, penalties and constraint."""
        plain = [i for i, r in enumerate(self.rows) if not r.processed]
        chosen: dict[int, tuple[int, list[TokenLogprob]]] = {}
        greedy = [i for i in plain if self.rows[i].cfg.greedy]
        lazy: list[tuple[int, mx.array]] = []
        if greedy:   # one argmax for every greedy row
            lazy.append((-1, mx.argmax(logits[mx.array(greedy)], axis=-1)))
        for i in plain:
            if not self.rows[i].cfg.greedy:
                lazy.append((i, choose(logits[i : i + 1], self.rows[i].cfg, self.rows[i].rng)))
        mx.eval([a for _, a in lazy])
        for i, values in lazy:
            if i == -1:
                chosen.update({g: (int(v), []) for g, v in zip(greedy, values.tolist())})
            else:
                chosen[i] = (int(values.item()), [])
        for i, row in enumerate(self.rows):
            if row.processed:   # its logits need its own history on the host: one row at a time
                processor = row.processor
                processed = processor.apply(logits[i : i + 1], [[]])
                token = int(choose(processed, row.cfg, row.rng)[0].item())
                chosen[i] = (token, processor.logprobs(processed, [token]))
                processor.advance([token])
        return [chosen[i] for i in range(len(self.rows))]
