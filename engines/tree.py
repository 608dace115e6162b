"""Token-tree layout for verify forwards. A chain (MTP, DFlash) is the special case of one branch.

Slot 0 is the root: the pending token, already chosen but not yet in the target caches. Every
other slot is a draft token whose parent slot is smaller than its own (parent < child), so a walk
in slot order always meets parents first. Depth is not monotone in slot order.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class TreeLayout:
    parents: tuple[int, ...]   # parents[0] == -1
    depths: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.parents or self.parents[0] != -1:
            raise ValueError("slot 0 must be the root (parent -1)")
        for slot, parent in enumerate(self.parents[1:], start=1):
            if not 0 <= parent < slot:
                raise ValueError(f"slot {slot}: parent {parent} must be an earlier slot")
            if self.depths[slot] != self.depths[parent] + 1:
                raise ValueError(f"slot {slot}: depth must be its parent's depth + 1")

    @classmethod
    def from_parents(cls, parents: list[int] | tuple[int, ...]) -> "TreeLayout":
        depths: list[int] = []
        for parent in parents:
            depths.append(0 if parent < 0 else depths[parent] + 1)
        return cls(tuple(parents), tuple(depths))

    @classmethod
    def chain(cls, length: int) -> "TreeLayout":
        return cls.from_parents([-1] + list(range(length - 1)))

    @property
    def size(self) -> int:
        return len(self.parents)

    @cached_property
    def levels(self) -> tuple[tuple[int, ...], ...]:
        """Slots grouped by depth: the GDN recurrence runs one level at a time."""
        out: list[list[int]] = [[] for _ in range(max(self.depths) + 1)]
        for slot, depth in enumerate(self.depths):
            out[depth].append(slot)
        return tuple(tuple(level) for level in out)

    @cached_property
    def visibility(self) -> np.ndarray:
        """(T, T) bool: row i sees column j iff j is an ancestor of i or i itself."""
        size = self.size
        vis = np.zeros((size, size), dtype=bool)
        for slot in range(size):
            node = slot
            while node >= 0:
                vis[slot, node] = True
                node = self.parents[node]
        return vis

    def path_to(self, slot: int) -> list[int]:
        """Slots from the root to `slot`, inclusive."""
        path = []
        while slot >= 0:
            path.append(slot)
            slot = self.parents[slot]
        return path[::-1]

    def conv_windows(self, kernel: int) -> np.ndarray:
        """(T, kernel) row indices into concat(conv_state[kernel-1 rows], slot rows[T]).

        Each slot's causal-conv window is its own row and its kernel-1 predecessors along the
        root path, continuing into the cached conv state past the root.
        """
        history = kernel - 1

        def previous(row: int) -> int:
            if row >= history:  # a slot row
                parent = self.parents[row - history]
                return history + parent if parent >= 0 else history - 1
            return row - 1

        windows = np.zeros((self.size, kernel), dtype=np.int32)
        for slot in range(self.size):
            row = history + slot
            for col in range(kernel - 1, -1, -1):
                windows[slot, col] = row
                row = previous(row) if col else row
        return windows
