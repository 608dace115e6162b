"""Token-tree layout for verify forwards. A chain (MTP, DFlash) is the special case of one branch.

Slot 0 is the root: the pending token, already chosen but not yet in the target caches. Every
other slot is a draft token whose parent slot is smaller than its own (parent < child), so a walk
in slot order always meets parents first. Depth is not monotone in slot order.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property, lru_cache

import mlx.core as mx
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


def all_layouts(budget: int, max_depth: int) -> list[TreeLayout]:
    """Every layout a tree of `budget` drafted nodes can take (slots in pop order: each parent before
    its children), up to `max_depth` deep: what a budget's host cycles may meet. budget! of them."""
    layouts = []
    for parents in itertools.product(*(range(slot) for slot in range(1, budget + 1))):
        layout = TreeLayout.from_parents((-1,) + parents)
        if max(layout.depths) <= max_depth:
            layouts.append(layout)
    return layouts


# -- trees as device data (the pipelined speculative cycle: no host read between draft and verify) ---
@dataclass(frozen=True)
class DeviceTree:
    """A verify tree whose shape (slot count) is fixed and whose structure may be device data.

    `layout` is set when the structure is known on the host (a chain): the forwards then take their
    compiled per-layout paths. Otherwise the structure is in the arrays alone, so every tree of one
    size shares one traced graph and the host never reads the drafter's proposal.
    """

    size: int
    depths: mx.array        # (T,) int32
    parents: mx.array       # (T,) int32, parents[0] = -1
    visibility: mx.array    # (T, T) bool, ancestor-or-self
    windows: mx.array       # (T, kernel) int32 rows into concat(conv_state, slot rows), see conv_windows
    layout: TreeLayout | None = None
    max_depth: mx.array | int = 0   # deepest slot's depth (an int when the layout is known)
    inclusive: mx.array | None = None   # (T, T) float32 visibility and its strict part: the GDN
    strict: mx.array | None = None      # recurrence's path masks, built once per tree, not per layer

    @classmethod
    def of(cls, layout: TreeLayout, kernel: int) -> "DeviceTree":
        return _device_tree(layout, kernel)


@lru_cache(maxsize=64)
def _device_tree(layout: TreeLayout, kernel: int) -> DeviceTree:
    inclusive = layout.visibility.astype(np.float32)
    strict = inclusive * (1.0 - np.eye(layout.size, dtype=np.float32))
    return DeviceTree(layout.size, mx.array(layout.depths, dtype=mx.int32), mx.array(layout.parents, dtype=mx.int32),
                      mx.array(layout.visibility), mx.array(layout.conv_windows(kernel)), layout, max(layout.depths),
                      mx.array(inclusive), mx.array(strict))


class BestFirstTables:
    """DDTree's best-first tree (the `budget` most probable prefixes of the per-depth top-K
    candidates) as fixed-shape array ops, precomputed once per (budget, depths, width, kernel).

    Log-probabilities are <= 0, so a prefix scores no higher than its parent or its next-better
    sibling: the B best prefixes always include those, and a prefix of depth d with ranks r_1..r_d
    is only among them if d + sum(r) <= B. Those candidates (15 for B = 4) are enumerated here in
    order of d + sum(r), parents first; a verify ranks them by score (ties: earlier candidate, as
    the heap) and keeps the top B in candidate order, which gives parent < child slots.
    """

    def __init__(self, budget: int, depths: int, width: int, kernel: int):
        candidates: list[tuple[int, ...]] = []
        frontier: list[tuple[int, ...]] = [()]
        while frontier:   # breadth-first over (depth, ranks) in order of cost d + sum(r)
            grown = []
            for ranks in frontier:
                for rank in range(width):
                    child = ranks + (rank,)
                    if len(child) <= depths and len(child) + sum(child) <= budget:
                        grown.append(child)
            frontier = grown
            candidates += grown
        candidates.sort(key=lambda r: (len(r) + sum(r), len(r), r))
        index = {ranks: i + 1 for i, ranks in enumerate(candidates)}   # extended index: 0 is the root
        count = len(candidates) + 1
        parent = np.full(count, -1, dtype=np.int32)
        depth = np.zeros(count, dtype=np.int32)
        rank = np.zeros(count, dtype=np.int32)
        picks = np.zeros((count, depths * width), dtype=np.float32)   # score = picks @ top_logprobs.ravel()
        for ranks, e in index.items():
            parent[e] = index.get(ranks[:-1], 0)
            depth[e], rank[e] = len(ranks), ranks[-1]
            for d, r in enumerate(ranks):
                picks[e, d * width + r] = 1.0
        ancestors = np.zeros((count, count), dtype=bool)
        history = kernel - 1
        # ancestor at distance j (0 = self) as an extended index, or history + a (a < 0) for the
        # conv-state row before the root at distance j - depth
        at_distance = np.zeros((count, kernel), dtype=np.int32)
        for e in range(count):
            node, j = e, 0
            while node >= 0:
                ancestors[e, node] = True
                if j < kernel:
                    at_distance[e, j] = node
                node, j = (parent[node] if node else -1), j + 1
            for j in range(depth[e] + 1, kernel):
                at_distance[e, j] = -(j - depth[e])
        self.budget = min(budget, count - 1)
        self.size = self.budget + 1
        self.width, self.history = width, history
        self.parent, self.depth, self.rank = mx.array(parent), mx.array(depth), mx.array(rank)
        self.picks = mx.array(picks[1:])                       # (C, depths * width)
        self.ancestors = mx.array(ancestors)
        self.at_distance = mx.array(at_distance[:, ::-1].copy())   # column c: distance kernel-1-c
        self.candidate_index = mx.array(np.arange(1, count, dtype=np.int32))
        # materialised here: tables built at load (one thread) are used by the worker thread's stream
        mx.eval(self.parent, self.depth, self.rank, self.picks, self.ancestors, self.at_distance, self.candidate_index)
        self._build = mx.compile(self._arrays)   # ~25 small ops: one trace, fused where MLX can

    def tree(self, top_logprobs: mx.array, top_tokens: mx.array) -> tuple[mx.array, DeviceTree]:
        """(draft tokens (B,), tree) from the drafter's sorted per-depth candidates, all lazy."""
        tokens, depths, parents, visibility, windows, inclusive, strict, deepest = self._build(top_logprobs, top_tokens)
        return tokens, DeviceTree(self.size, depths, parents, visibility, windows, None, deepest, inclusive, strict)

    def _arrays(self, top_logprobs: mx.array, top_tokens: mx.array) -> tuple[mx.array, ...]:
        flat = mx.maximum(top_logprobs.astype(mx.float32), -1e30).reshape(-1)
        score = self.picks @ flat                                       # (C,)
        index = self.candidate_index
        beats = (score[:, None] > score[None, :]) | ((score[:, None] == score[None, :]) & (index[:, None] < index[None, :]))
        chosen = beats.astype(mx.int32).sum(axis=0) < self.budget       # the B best (closed under parents)
        order = mx.argsort(mx.where(chosen, index, index + index.shape[0]))[: self.budget]
        nodes = mx.concatenate([mx.zeros((1,), dtype=mx.int32), index[order]])   # (T,) extended indices
        slot_of = mx.argmax(nodes[None, :] == mx.arange(self.parent.shape[0], dtype=mx.int32)[:, None], axis=1)
        parents = mx.where(nodes == 0, -1, slot_of[self.parent[nodes]].astype(mx.int32))
        depths = self.depth[nodes]
        visibility = self.ancestors[nodes][:, nodes]
        at = self.at_distance[nodes]                                    # (T, kernel)
        windows = mx.where(at >= 0, self.history + slot_of[mx.maximum(at, 0)].astype(mx.int32), self.history + at)
        tokens = top_tokens.reshape(-1)[(self.depth[nodes[1:]] - 1) * self.width + self.rank[nodes[1:]]]
        inclusive = visibility.astype(mx.float32)
        strict = inclusive * (1.0 - mx.eye(self.size, dtype=mx.float32))
        return tokens, depths, parents, visibility, windows.astype(mx.int32), inclusive, strict, depths.max()


@dataclass(frozen=True)
class DeviceWalk:
    """The walk of a verified tree as arrays: what to commit and what was emitted."""

    path: mx.array      # (T,) accepted slots in depth order, then filler (slot 0)
    last: mx.array      # slot of the deepest accepted node
    accepted: mx.array  # number of accepted draft tokens (depth of `last`)
    emitted: mx.array   # (T,) accepted draft tokens then the bonus; entries past `accepted` are filler


def walk_device(tree: DeviceTree, tokens: mx.array, choices: mx.array) -> DeviceWalk:
    """`walk` without a host read: a slot is accepted iff every node on its root path matched the
    target's choice at its parent (siblings hold distinct tokens, so at most one slot per depth)."""
    return DeviceWalk(*_walk_compiled(tree.parents, tree.depths, tree.visibility, tokens, choices))


def _walk_arrays(parents: mx.array, depths: mx.array, visibility: mx.array, tokens: mx.array,
                 choices: mx.array) -> tuple[mx.array, ...]:
    size = parents.shape[0]
    slot_tokens = mx.concatenate([mx.zeros((1,), dtype=tokens.dtype), tokens]).astype(mx.int32)
    choices = choices.astype(mx.int32)
    matched = slot_tokens == choices[mx.maximum(parents, 0)]
    matched = matched | (mx.arange(size) == 0)
    misses = (visibility.astype(mx.float32) @ (1.0 - matched.astype(mx.float32))[:, None])[:, 0]
    accepted_slots = misses == 0
    deep = mx.where(accepted_slots, depths, -1)
    last = mx.argmax(deep)
    depth = deep.max()
    at_depth = accepted_slots[None, :] & (depths[None, :] == mx.arange(size, dtype=mx.int32)[:, None])
    path = mx.argmax(at_depth, axis=1).astype(mx.int32)                 # (T,): slot at each depth (0 past the end)
    position = mx.arange(size, dtype=mx.int32)
    drafts = slot_tokens[path[mx.minimum(position + 1, size - 1)]]
    bonus = choices[last]
    emitted = mx.where(position < depth, drafts, bonus)
    return path, last, depth, emitted


_walk_compiled = mx.compile(_walk_arrays)
