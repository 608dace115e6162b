"""The one prefill: run prompt tokens through the target into its caches, in bounded chunks.

Long prompts run in pieces of PREFILL_CHUNK rows, each evaluated before the next, so peak memory
stays bounded (as mlx-lm's generate_step does). Every engine prefills here; the MTP head fills its
own cache over the same chunks (`chunk_slices`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generator, Sequence

import mlx.core as mx

from contracts.engine import Pause

from .bundle import ModelBundle
from .prefix_cache import PrefixCache, PrefixEntry
from .rows import READS_ALL, Reads, Rows, Window, arrays, hold, joined
from .target import ForwardOutput, forward_causal

PREFILL_CHUNK = 2048
# While other requests run on the worker, a prefill goes in smaller pieces and gives the worker back
# between them (contracts.engine.Pause), so running streams keep flowing during a long prompt.
INTERLEAVED_CHUNK = 512
# A prompt's end this few rows after a boundary stored for it (the conversation's end, before the generation
# prompt) gets no snapshot of its own: resuming at the boundary costs those rows of prefill, while a snapshot
# costs the whole GatedDeltaNet state (147 MiB on a 27B-class model). Engines deposit their state on the
# boundary's entry then, so the prefill keeps the rows their windows read at the boundary too.
SNAPSHOT_GAP = 16


def chunk_slices(length: int, *, last_alone: bool = False, size: int = PREFILL_CHUNK) -> list[slice]:
    """Row slices of at most `size` covering [0, length). With `last_alone` the final row gets a
    slice of its own, so its logits come from a one-row forward exactly like a decode step's."""
    end = length - 1 if last_alone and length > 0 else length
    slices = [slice(start, min(start + size, end)) for start in range(0, end, size)]
    if end < length:
        slices.append(slice(end, length))
    return slices


@dataclass(frozen=True)
class PrefixPlan:
    """A request's use of the prefix cache: its scope (tenant) and the boundaries worth a snapshot
    besides the end of the prompt (e.g. the end of the conversation before the generation prompt,
    where the next turn's prompt diverges when the template drops old reasoning)."""

    store: PrefixCache
    scope: str = ""
    points: tuple[int, ...] = ()


@dataclass
class PrefixUse:
    """What a prefill did with the prefix cache: the entry it resumed from (if any) and the entry
    at the end of its tokens (engines deposit their own state there, and resume from it later)."""

    store: PrefixCache
    resumed: PrefixEntry | None
    stored: PrefixEntry | None

    def extra(self, engine: str) -> tuple[int, list[Rows]] | None:
        """(tokens, rows) an engine may resume from: the rows of its deposit on the resumed entry."""
        rows = self.store.extra(self.resumed, engine) if self.resumed is not None else None
        return (len(self.resumed.tokens), rows) if rows is not None else None

    def deposit(self, engine: str, tokens: int, window: Window, arrays: list[Rows]) -> None:
        """Leave an engine's per-row state after the stored entry's `tokens` (what `window` reads of its rows,
        rows first) for later requests."""
        if self.stored is not None and len(self.stored.tokens) == tokens:
            self.store.add_extra(self.stored, engine, window, arrays)


class _Outputs:
    """A prefill's per-row outputs so far (hidden states, captured layers), as consecutive row blocks, each
    kept to what its window reads: a long prompt's middle is dropped as the prefill passes it."""

    def __init__(self, reads: Reads, keep: tuple[int, ...]):
        self.reads = reads
        self.hidden: list[Rows] = []
        self.layers: dict[int, list[Rows]] = {i: [] for i in keep}

    def add(self, hidden: Rows, layers: dict[int, Rows]) -> None:
        self.hidden.append(hidden)
        for i, blocks in self.layers.items():
            blocks.append(layers[i])

    def trim(self, total: int) -> None:
        """Keep what the windows read of a prompt that ended at row `total` (the rows done so far: a snapshot
        there reads them so, and the whole prompt's windows lie within them and the rows still to come)."""
        held: list[mx.array] = []
        for window, blocks in ((self.reads.hidden, self.hidden),
                               *((self.reads.layers, b) for b in self.layers.values())):
            if window.bounded and len(blocks) > 0:
                blocks[:] = [hold(joined(blocks), window, total)]
                held += arrays(blocks[0])
        mx.eval(held)

    def output(self) -> ForwardOutput:
        self.hidden[:] = [joined(self.hidden)]
        for blocks in self.layers.values():
            blocks[:] = [joined(blocks)]
        return ForwardOutput(self.hidden[0], {i: blocks[0] for i, blocks in self.layers.items()})


def prefill(
    bundle: ModelBundle, cache: list, tokens: Sequence[int], capture: tuple[int, ...] = (), last_alone: bool = False
) -> ForwardOutput | None:
    """Append `tokens` to `cache`. Returns every row's final hidden state and the outputs of the
    `capture` layers (None when `tokens` is empty)."""
    return prefill_cached(bundle, cache, tokens, capture, last_alone)[0]


def prefill_cached(
    bundle: ModelBundle, cache: list, tokens: Sequence[int], capture: tuple[int, ...] = (), last_alone: bool = False,
    plan: PrefixPlan | None = None, reads: Reads = READS_ALL,
) -> tuple[ForwardOutput | None, int, PrefixUse | None]:
    """`prefill_stepwise` run to the end in one go (no pauses)."""
    steps = prefill_stepwise(bundle, cache, tokens, capture, last_alone, plan, pause_every=0, reads=reads)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def prefill_stepwise(
    bundle: ModelBundle, cache: list, tokens: Sequence[int], capture: tuple[int, ...] = (), last_alone: bool = False,
    plan: PrefixPlan | None = None, pause_every: int | None = None, reads: Reads = READS_ALL,
) -> Generator[Pause, None, tuple[ForwardOutput | None, int, PrefixUse | None]]:
    """`prefill`, and how many leading tokens came from the prefix cache. With a plan, the longest
    cached prefix of the tokens (all but a last-alone row) is restored instead of computed, and
    snapshots are stored at the plan's boundaries and at the end of those tokens: the state there
    is the same whichever engine prefills, so one entry serves raw, mtp and ddtree.

    The output holds the rows `reads` (and the plan's store) read of the hidden states and captured layers:
    a bounded window's rows, and the last-alone row, as HeldRows (engines.rows).

    Yields a Pause after every `pause_every` computed rows (None: INTERLEAVED_CHUNK while other
    requests share the worker, else PREFILL_CHUNK; 0: never), computing in pieces of that size then."""
    pause_rows = 0   # rows computed before a pause is due (0: after every piece)
    if pause_every is None:
        batch = bundle.decode_batch
        shared = batch is not None and batch.active > 1
        # alone too, after each whole PREFILL_CHUNK: the worker sees a cancel (the client hung up, the deadline
        # passed) within one piece, not after the whole prompt (minutes of a long agent context on a large
        # model); a prompt of one piece still runs without a pause
        pause_every, pause_rows = (INTERLEAVED_CHUNK, 0) if shared else (PREFILL_CHUNK, PREFILL_CHUNK)
    size = pause_every or PREFILL_CHUNK
    ids = [int(t) for t in tokens]
    body = len(ids) - 1 if last_alone and ids else len(ids)
    keep = tuple(sorted(set(capture) | set(plan.store.capture))) if plan is not None else capture
    outputs = _Outputs(reads.union(plan.store.reads) if plan is not None else reads, keep)
    array = mx.array(ids, dtype=mx.uint32)
    start = 0
    entry = stored = None
    if plan is not None:
        entry = plan.store.lookup(plan.scope, ids[:body])
        if entry is not None:
            outputs.add(*plan.store.restore(entry, cache))
            start = len(entry.tokens)
    bounds = sorted({p for p in (plan.points if plan else ()) if start < p < body} | {body})
    near = max((p for p in (plan.points if plan else ()) if body - SNAPSHOT_GAP <= p < body), default=None)
    # the entry at that boundary, once there is one: it serves this prompt's end too
    near_entry = entry if entry is not None and near is not None and len(entry.tokens) == near else None
    done = paused_at = start
    for bound in bounds:
        for rows in chunk_slices(bound - done, size=size):
            out = forward_causal(bundle, array[done + rows.start : done + rows.stop], cache, keep)
            mx.eval(out.hidden, [c.state for c in cache])
            outputs.add(out.hidden, out.layer_outputs)
            outputs.trim(done + rows.stop if near is None else min(done + rows.stop, near))
            if pause_every and done + rows.stop < len(ids) and done + rows.stop - paused_at >= pause_rows:
                paused_at = done + rows.stop
                yield Pause(done + rows.stop - start, len(ids) - start)
        if plan is not None and bound > done:
            if bound == body and near_entry is not None:
                stored = near_entry
            else:
                out = outputs.output()
                stored = plan.store.insert(plan.scope, ids[:bound], cache, out.hidden,
                                           {i: out.layer_outputs[i] for i in plan.store.capture})
                near_entry = stored if bound == near else near_entry
        done = bound
    if plan is not None and entry is not None and len(entry.tokens) == body:
        stored = entry   # the whole body came from the cache: deposits go to that entry
    if body < len(ids):   # the last row alone: its logits come from a one-row forward, like a decode step's
        out = forward_causal(bundle, array[body:], cache, keep)
        mx.eval(out.hidden, [c.state for c in cache])
        outputs.add(out.hidden, out.layer_outputs)
    use = PrefixUse(plan.store, entry, stored) if plan is not None else None
    return (outputs.output() if outputs.hidden else None), start, use
