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

Left padding makes a batch's attention caches rows × its longest row: an agent's 100k-token context
beside seven short chats would hold (and read at every step) eight copies of its length. So streams
batch in groups of like lengths (`padding_fits`): short chats in one, long agent contexts in another,
each group one forward per step; a stream no group fits decodes alone, interleaved with them.
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

# A group may pad its rows by KV of up to PAD_WEIGHT_SHARE of the weights' bytes in all (a join saves a
# forward, which reads every weight where reading them is what a step costs, as a large model's on a
# Mac; padding is read at every step and held), or by up to PAD_SHARE of the KV its rows really hold.
# On a GPU a forward also costs at least its kernel launches, whatever the weights: there padding of up
# to GPU_FREE_PADDING_BYTES is always taken (H200, the demo: one padded batch of a 7,000-token context
# and seven short rows ran 1.8x the tokens/s of groups). On the CPU padding costs its arithmetic (the
# demo: groups 1.19x one batch), so the weights' share alone.
PAD_WEIGHT_SHARE = 0.25
PAD_SHARE = 0.5
GPU_FREE_PADDING_BYTES = 256 * 2**20


def free_padding_tokens(bundle: ModelBundle) -> int:
    """Tokens of padding a group may hold whatever its rows' lengths."""
    free = int(bundle.parameter_bytes() * PAD_WEIGHT_SHARE)
    if mx.default_device().type == mx.gpu:
        free = max(free, GPU_FREE_PADDING_BYTES)
    return free // bundle.kv_bytes_per_token()


def padding_fits(lengths: list[int], free_tokens: int) -> bool:
    """Rows of these lengths (tokens in their caches) may share left-padded caches."""
    padding = len(lengths) * max(lengths) - sum(lengths)
    return padding <= max(free_tokens, PAD_SHARE * sum(lengths))


@dataclass(frozen=True)
class BatchToken:
    """One row's output of one batched step."""

    token: int
    seconds: float          # the step's wall time (shared by every row in it)
    rows: int               # rows in the step
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass(eq=False)
class BatchRow:
    """One request in a group: the token it feeds next and what the steps produced for it."""

    pending: int
    cfg: SamplerConfig
    rng: Rng
    processor: TargetProcessor | None
    length: int = 0         # tokens in its caches (its rows of the group's, padding aside)
    group: "Group | None" = None
    ready: deque[BatchToken] = field(default_factory=deque)

    @property
    def processed(self) -> bool:
        """Its logits depend on its own emitted tokens (penalties, a constraint) or it reports log-probs."""
        return self.processor is not None and self.processor.per_token


@dataclass(eq=False)
class RawStream:
    """A request decoding raw: alone on its own caches, or a row of a group."""

    cache: list             # its own caches while alone
    row: BatchRow | None = None


class Group:
    """Rows sharing left-padded caches and one forward per step."""

    def __init__(self, owner: "DecodeBatch"):
        self.owner = owner
        self.rows: list[BatchRow] = []
        self.cache: list | None = None
        self._queued: mx.array | None = None   # the next step's tokens, in flight (pipelining)
        self._last: float | None = None         # when the previous step's tokens landed

    def fits(self, length: int) -> bool:
        """A row of `length` tokens may join (room, and padding that fits)."""
        return len(self.rows) < self.owner.max_rows and self.owner.pads([*(r.length for r in self.rows), length])

    def join(self, cache: list, row: BatchRow) -> None:
        self.drain()
        single = [type(layer).merge([layer]) for layer in cache]
        if self.cache is None:
            self.cache = single
        else:
            for mine, theirs in zip(self.cache, single):
                mine.extend(theirs)
        self.rows.append(row)
        row.group = self
        self._last = None   # the next step's time includes the join: not a step cost

    def leave(self, row: BatchRow) -> None:
        self.drain()
        index = self.rows.index(row)
        self.rows.pop(index)
        row.group = None
        if not self.rows:
            self.cache = None
            self._last = None
            return
        keep = [i for i in range(len(self.rows) + 1) if i != index]
        for layer in self.cache:
            layer.filter(keep)

    def extract(self, row: BatchRow) -> list:
        """The row's caches of its own."""
        self.drain()
        index = self.rows.index(row)
        return [layer.extract(index) for layer in self.cache]

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
        return self.owner.bundle.model(inputs, cache=self.cache)[:, -1, :]

    def _distribute(self, tokens: list[int], logprobs: list[list[TokenLogprob]]) -> None:
        now = time.perf_counter()
        seconds = now - self._last if self._last is not None else 0.0
        self._last = now
        for row, token, lp in zip(self.rows, tokens, logprobs):
            row.pending = int(token)
            row.length += 1   # the token it fed
            row.ready.append(BatchToken(int(token), seconds, len(self.rows), lp))
        self.owner.steps += 1
        self.owner.row_steps += len(self.rows)

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


class DecodeBatch:
    """The raw decoding groups of one loaded target. Used from the worker thread only."""

    def __init__(self, bundle: ModelBundle, max_rows: int = 8):
        self.bundle = bundle
        self.max_rows = max_rows   # rows per group
        self.free_padding = free_padding_tokens(bundle) if bundle is not None else 0
        self.groups: list[Group] = []
        self.raw_streams: list[RawStream] = []   # requests decoding raw now, batched or alone
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
    def stream(self, cache: list) -> Iterator[RawStream]:
        """Registers a raw decoder while it runs (alone or batched); `cache` is its own while alone."""
        stream = RawStream(cache)
        self.raw_streams.append(stream)
        try:
            yield stream
        finally:
            self.raw_streams.remove(stream)

    @property
    def streams(self) -> int:
        return len(self.raw_streams)

    @property
    def rows(self) -> list[BatchRow]:
        return [row for group in self.groups for row in group.rows]

    @property
    def enabled(self) -> bool:
        return self.max_rows >= 2

    def pads(self, lengths: list[int]) -> bool:
        """Rows of these lengths may share a group (`padding_fits` with this model's free padding)."""
        return padding_fits(lengths, self.free_padding)

    def length(self, cache: list) -> int:
        """Tokens in a request's own caches."""
        return int(cache[self.bundle.decoder.fa_idx].offset)

    def _lone_lengths(self, other_than: RawStream | None = None) -> list[int]:
        return [self.length(s.cache) for s in self.raw_streams if s.row is None and s is not other_than]

    def _group_for(self, stream: RawStream) -> Group | None:
        """The group the lone stream should join: the one its length pads least, or a new one where another
        lone stream could join it; None: it decodes alone."""
        if not self.enabled:
            return None
        mine = self.length(stream.cache)
        fitting = [g for g in self.groups if g.fits(mine)]
        if fitting:
            return min(fitting, key=lambda g: abs(max(r.length for r in g.rows) - mine))
        if any(self.pads([mine, other]) for other in self._lone_lengths(stream)):
            return Group(self)
        return None

    def wants(self, stream: RawStream) -> bool:
        """The lone stream should join a group (one that fits its length, or a new one for it and another
        lone stream of like length)."""
        return self._group_for(stream) is not None

    def shares_with(self, length: int) -> int:
        """Other requests a request of `length` tokens could share a step with: those generating, less the
        rows of groups too far from its length to take it."""
        apart = sum(len(g.rows) for g in self.groups if not self.pads([*(r.length for r in g.rows), length]))
        return self.active - 1 - apart

    # -- joining and leaving -------------------------------------------------------------------
    def join(self, stream: RawStream, pending: int, cfg: SamplerConfig, rng: Rng,
             processor: TargetProcessor | None = None) -> BatchRow:
        """Adds a lone stream whose cache holds everything before `pending` (not yet fed) to its group."""
        group = self._group_for(stream) or Group(self)
        if group not in self.groups:
            self.groups.append(group)
        row = BatchRow(pending, cfg, rng, processor, length=self.length(stream.cache))
        group.join(stream.cache, row)
        # the group holds a copy of its rows: emptying the request's own list (which its engine holds
        # too) frees its caches, else a batched request would hold its whole context twice
        stream.cache.clear()
        stream.row = row
        return row

    def leave(self, row: BatchRow) -> None:
        group = row.group
        if group is None:
            return
        group.leave(row)
        if not group.rows:
            self.groups.remove(group)

    def alone(self, row: BatchRow) -> bool:
        """The row is its group's only one, no lone stream could join it, and it has nothing buffered: it
        decodes faster on its own caches, pipelined (a queued step is drained first; its token is
        buffered, so not yet)."""
        group = row.group
        if group is None or group.rows != [row]:
            return False
        if any(self.pads([row.length, other]) for other in self._lone_lengths()):
            return False
        group.drain()
        return not row.ready

    def split_off(self, stream: RawStream) -> int:
        """Takes the stream's row out with caches of its own (to decode alone); returns its pending token."""
        row = stream.row
        stream.cache = row.group.extract(row)
        self.leave(row)
        stream.row = None
        return row.pending

    def take(self, row: BatchRow) -> list[BatchToken]:
        return row.group.take(row)
