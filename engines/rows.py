"""A prompt's per-row outputs, kept only where the engines read them.

The engines read a prompt's hidden states and captured layers near its start and end: the DFlash drafter its
context sink and window of captured layers, the MTP head the hidden states of its prompt window, the first
token the last row's. A long prompt's middle then need not be held, by a prefill or by the prefix cache.

`Window(first, last)`: the rows read of a prompt of P rows, its first `first` and its last `last` (None: every
row). `Reads`: an engine's windows over the hidden states and over the captured layers. `HeldRows`: a (P, H)
array of which only some spans are held; slicing it inside them gives the rows slicing the whole would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Union

import mlx.core as mx


class RowsNotHeld(LookupError):
    """A slice asked for rows that were not kept: a window narrower than what an engine reads."""


@dataclass(frozen=True)
class Window:
    first: int = 0
    last: int | None = None            # None: every row

    @property
    def bounded(self) -> bool:
        return self.last is not None

    def spans(self, start: int, end: int, total: int) -> list[tuple[int, int]]:
        """The rows of [start, end) read of a prompt of `total` rows, as ascending disjoint spans."""
        if self.last is None:
            return [(start, end)] if start < end else []
        head = (start, min(end, self.first))
        tail = (max(start, total - self.last, head[1]), end)
        if head[0] < head[1] and head[1] == tail[0]:   # they meet: one span
            return [(head[0], tail[1])]
        return [s for s in (head, tail) if s[0] < s[1]]

    def union(self, other: Window) -> Window:
        last = None if self.last is None or other.last is None else max(self.last, other.last)
        return Window(max(self.first, other.first), last)


EVERY_ROW = Window()
NO_ROW = Window(0, 0)


@dataclass(frozen=True)
class Reads:
    """What an engine reads of its prompt's rows: hidden states, captured layers."""

    hidden: Window = EVERY_ROW
    layers: Window = EVERY_ROW

    def union(self, other: Reads) -> Reads:
        return Reads(self.hidden.union(other.hidden), self.layers.union(other.layers))


READS_ALL = Reads()
READS_NOTHING = Reads(NO_ROW, NO_ROW)


def widest(reads: Iterable[Reads]) -> Reads:
    out = READS_NOTHING
    for r in reads:
        out = out.union(r)
    return out


@dataclass(frozen=True)
class HeldRows:
    """Rows [0, length) of a 2-D array, of which only `spans` ((first row, rows), ascending, disjoint) are held."""

    length: int
    spans: tuple[tuple[int, mx.array], ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.length, *(self.spans[0][1].shape[1:] if self.spans else ()))

    @property
    def nbytes(self) -> int:
        return sum(block.nbytes for _, block in self.spans)

    def arrays(self) -> list[mx.array]:
        return [block for _, block in self.spans]

    def holds(self, start: int, stop: int) -> bool:
        return self._pieces(start, stop)[1] >= stop

    def _pieces(self, start: int, stop: int) -> tuple[list[mx.array], int]:
        """Slices of the held blocks covering rows start.. without a gap, and the row they reach."""
        pieces, covered = [], start
        for first, block in self.spans:
            end = first + block.shape[0]
            if end <= covered or first >= stop:
                continue
            if first > covered:
                break
            pieces.append(block[covered - first: min(stop, end) - first])
            covered = min(stop, end)
        return pieces, covered

    def __getitem__(self, rows: slice) -> mx.array:
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise TypeError("HeldRows is sliced by contiguous row ranges only")
        start, stop, _ = rows.indices(self.length)
        pieces, covered = self._pieces(start, stop)
        if covered < stop:
            raise RowsNotHeld(f"rows {start}..{stop} asked of {self.length}: from row {covered} not held")
        if not pieces:
            return mx.zeros((0, *self.shape[1:]))
        return pieces[0] if len(pieces) == 1 else mx.concatenate(pieces)


Rows = Union[mx.array, HeldRows]


def joined(parts: list[Rows]) -> Rows:
    """Consecutive row blocks as one (HeldRows where any part is)."""
    if len(parts) == 1:
        return parts[0]
    if not any(isinstance(p, HeldRows) for p in parts):
        return mx.concatenate(parts)
    spans: list[tuple[int, mx.array]] = []
    length = 0
    for part in parts:
        spans += [(length + first, block) for first, block in part.spans] if isinstance(part, HeldRows) \
            else [(length, part)]
        length += part.shape[0]
    return HeldRows(length, tuple(spans))


def hold(rows: Rows, window: Window, total: int | None = None) -> Rows:
    """What `window` reads of `rows` (the first rows of a prompt of `total`; default: all of it): `rows` itself
    when that is every row (as one array), else a HeldRows of copies (a view would keep the whole buffer alive)."""
    length = rows.shape[0]
    spans = window.spans(0, length, length if total is None else total)
    if spans == [(0, length)]:
        return rows if isinstance(rows, mx.array) else rows[0:length]
    return copied(rows, length, spans)


def copied(rows: Rows, length: int, spans: list[tuple[int, int]]) -> HeldRows:
    """`spans` of `rows` as a HeldRows of `length` rows: copies, but for a block `rows` already holds whole."""
    return HeldRows(length, tuple((a, _copy(rows, a, b)) for a, b in spans))


def _copy(rows: Rows, a: int, b: int) -> mx.array:
    if isinstance(rows, HeldRows):
        for first, block in rows.spans:
            if first == a and block.shape[0] == b - a:
                return block
    return mx.array(rows[a:b])


def arrays(rows: Rows) -> list[mx.array]:
    return rows.arrays() if isinstance(rows, HeldRows) else [rows]
