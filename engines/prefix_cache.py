"""Prefix cache across requests: the target's state after a prompt prefix, reused by later requests
that start with the same tokens (chat clients and agents resend the whole conversation each turn).

The hybrid model's GatedDeltaNet state cannot be trimmed back to an earlier token, so entries are
exact snapshots at chosen boundaries (the end of each prompt but its last token, the end of the
system prompt and tools, the end of the conversation before the generation prompt), never trimmed copies. An entry holds what every engine
builds its state from: the target caches (attention KV and GDN conv/recurrent state), and the final
hidden state and captured layer outputs of every prefix row (the MTP head's KV and the DFlash
drafter's context features are computed from those; each engine may also leave its own state there),
so raw, mtp and ddtree all resume from it and stay exact. Snapshots are deep copies both ways: a live cache never aliases a stored one.

Memory is bounded by bytes (least recently used first out); an entry larger than the budget is not
stored. Entries are namespaced by a scope (the API key) unless the operator shares them.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Sequence

import mlx.core as mx


@dataclass
class PrefixEntry:
    scope: str
    tokens: tuple[int, ...]
    cache: list                       # target caches after `tokens` (owned by the store)
    hidden: mx.array                  # (L, H) final hidden state of every row
    layers: dict[int, mx.array]       # captured layer outputs of every row
    nbytes: int
    # engine name -> that engine's own state built from these rows (MTP head KV, drafter context),
    # deposited by the first request of that engine to reach this boundary
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class PrefixStats:
    lookups: int = 0
    hits: int = 0
    cached_tokens: int = 0            # prompt tokens served from the cache
    evictions: int = 0
    inserts: int = 0


def _nbytes(cache: list, hidden: mx.array, layers: dict[int, mx.array]) -> int:
    return sum(c.nbytes for c in cache) + hidden.nbytes + sum(a.nbytes for a in layers.values())


class PrefixCache:
    """LRU by bytes over exact prefix snapshots; thread-safe (the worker writes, scrapes read)."""

    def __init__(self, max_bytes: int, capture: tuple[int, ...], min_tokens: int = 16):
        self.max_bytes = max_bytes
        self.capture = capture            # layers every entry keeps (the union of the engines' needs)
        self.min_tokens = min_tokens      # shorter prefixes cost less to prefill than to snapshot
        self.entries: OrderedDict[tuple[str, tuple[int, ...]], PrefixEntry] = OrderedDict()
        self.bytes = 0
        self.stats = PrefixStats()
        self._lock = threading.Lock()

    def lookup(self, scope: str, tokens: Sequence[int]) -> PrefixEntry | None:
        """The longest stored prefix of `tokens` in `scope` (most recently used on a hit)."""
        key_tokens = tuple(int(t) for t in tokens)
        with self._lock:
            self.stats.lookups += 1
            best: PrefixEntry | None = None
            for (entry_scope, entry_tokens), entry in self.entries.items():
                n = len(entry_tokens)
                if entry_scope == scope and n <= len(key_tokens) and (best is None or n > len(best.tokens)) \
                        and key_tokens[:n] == entry_tokens:
                    best = entry
            if best is not None:
                self.entries.move_to_end((scope, best.tokens))
                self.stats.hits += 1
                self.stats.cached_tokens += len(best.tokens)
            return best

    def insert(self, scope: str, tokens: Sequence[int], cache: list, hidden: mx.array,
               layers: dict[int, mx.array]) -> PrefixEntry | None:
        """Store a snapshot (deep-copied here) of the state after `tokens`; None when it does not fit."""
        key = (scope, tuple(int(t) for t in tokens))
        if len(key[1]) < self.min_tokens:
            return None
        with self._lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                return self.entries[key]
        nbytes = _nbytes(cache, hidden, layers)
        if nbytes > self.max_bytes:
            return None
        entry = PrefixEntry(scope, key[1], copy.deepcopy(cache), mx.array(hidden),
                            {i: mx.array(a) for i, a in layers.items()}, nbytes)
        mx.eval(entry.hidden, list(entry.layers.values()), [c.state for c in entry.cache])
        with self._lock:
            self._evict(keep=0, incoming=nbytes)
            self.entries[key] = entry
            self.bytes += nbytes
            self.stats.inserts += 1
        return entry

    def _evict(self, keep: int, incoming: int = 0) -> None:
        """Least recently used first, until `incoming` more bytes fit (never below `keep` entries).
        Called with the lock held."""
        while len(self.entries) > keep and self.bytes + incoming > self.max_bytes:
            _, old = self.entries.popitem(last=False)
            self.bytes -= old.nbytes
            self.stats.evictions += 1

    def add_extra(self, entry: PrefixEntry, engine: str, state: Any, nbytes: int) -> None:
        """Attach an engine's state at the entry's boundary (deep-copied); evicts others to fit."""
        with self._lock:
            if engine in entry.extras or (entry.scope, entry.tokens) not in self.entries:
                return
            if entry.nbytes + nbytes > self.max_bytes:
                return
        state = copy.deepcopy(state)
        with self._lock:
            if engine in entry.extras or (entry.scope, entry.tokens) not in self.entries:
                return
            entry.extras[engine] = state
            entry.nbytes += nbytes
            self.bytes += nbytes
            self.entries.move_to_end((entry.scope, entry.tokens))
            self._evict(keep=1)   # the grown entry is the most recent: others go first

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self.bytes = 0
