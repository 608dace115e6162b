"""engines.rows: which rows a window reads, and HeldRows, which slices like the whole array where it holds rows
and says so where it does not."""

from __future__ import annotations

import random

import mlx.core as mx
import pytest

from engines.rows import EVERY_ROW, NO_ROW, HeldRows, Reads, RowsNotHeld, Window, hold, joined, widest


def test_a_window_reads_a_prompts_first_and_last_rows():
    window = Window(first=4, last=6)
    assert window.spans(0, 20, 20) == [(0, 4), (14, 20)]
    assert window.spans(0, 8, 8) == [(0, 8)]                 # short: the sink and the window meet
    assert window.spans(10, 20, 20) == [(14, 20)]           # an entry's own rows past its parent
    assert window.spans(2, 12, 20) == [(2, 4)]              # rows a later prompt end will not read
    assert EVERY_ROW.spans(3, 9, 100) == [(3, 9)] and NO_ROW.spans(0, 9, 9) == []
    assert widest([Reads(Window(0, 24), NO_ROW), Reads(NO_ROW, Window(64, 16))]) == \
        Reads(Window(0, 24), Window(64, 16))
    assert Window(0, 24).union(EVERY_ROW) == EVERY_ROW


def test_held_rows_slice_as_the_whole_array_where_held():
    rng = random.Random(0)
    whole = mx.arange(60 * 3, dtype=mx.float32).reshape(60, 3)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, 60), 4))
        spans = [(0, cuts[0]), (cuts[1], cuts[2]), (cuts[3], 60)]
        held = HeldRows(60, tuple((a, whole[a:b]) for a, b in spans))
        a, b = sorted(rng.sample(range(61), 2))
        if any(lo <= a and b <= hi for lo, hi in spans):
            assert mx.array_equal(held[a:b], whole[a:b])
        else:   # it crosses a gap
            with pytest.raises(RowsNotHeld):
                held[a:b]
    adjacent = HeldRows(10, ((0, whole[0:4]), (4, whole[4:10])))     # a slice across two blocks
    assert mx.array_equal(adjacent[2:7], whole[2:7]) and mx.array_equal(adjacent[-1:], whole[9:10])
    with pytest.raises(TypeError):
        adjacent[::2]


def test_hold_and_joined_keep_what_the_window_reads():
    whole = mx.arange(40 * 2, dtype=mx.float32).reshape(40, 2)
    assert hold(whole, EVERY_ROW) is whole
    held = hold(whole, Window(3, 5))
    assert [(a, block.shape[0]) for a, block in held.spans] == [(0, 3), (35, 5)] and held.nbytes == 8 * 2 * 4
    # a prefill's blocks: the rows held so far, then a new piece; dropped again relative to the rows done
    grown = joined([held, whole[:6] + 100])
    assert grown.shape == (46, 2)
    again = hold(grown, Window(3, 5))
    assert mx.array_equal(again[41:46], whole[1:6] + 100) and mx.array_equal(again[0:3], whole[0:3])
    assert again.spans[0][1] is held.spans[0][1]            # a block held whole is not copied again
    with pytest.raises(RowsNotHeld):
        hold(grown, EVERY_ROW)                              # every row asked: the middle is gone
