"""Prefix cache across requests: the target's state after a prompt prefix, reused by later requests
that start with the same tokens (chat clients and agents resend the whole conversation each turn).

The hybrid model's GatedDeltaNet state cannot be trimmed back to an earlier token, so entries are
exact snapshots at chosen boundaries (the end of each prompt but its last token, the end of the
system prompt and tools, the end of the conversation before the generation prompt). An entry holds
what every engine builds its state from: the target caches (attention KV and GDN conv/recurrent state),
and the final hidden states and captured layer outputs of the prefix rows (the MTP head's KV and the
DFlash drafter's context features are computed from those; each engine may also leave its own state
there), so raw, mtp and ddtree all resume from it and stay exact.

Rows are stored once. Everything that grows per token (attention keys and values, hidden states,
captured layers) is a prefix of any longer prompt's, so an entry keeps only the rows past its parent
(the longest entry its tokens extend) and the fixed-size state that cannot be cut back (every non-KV
layer's cache, in full). A request's boundaries and a conversation's turns then chain: turn N stores
what turn N adds, not the whole conversation again. An evicted entry drops its own state but keeps its
rows while a later entry still reads them (it is then `hollow`: no longer a hit itself).

Of the hidden states and captured layers an entry holds only the rows the engines read (engines.rows: the
drafter's sink and window, the MTP head's window) at its end; once hollow, at the end of the shortest entry
that still reads it, so an evicted turn keeps its KV and little else.

An engine's own state deposited on an entry chains the same way (`Deposit`): it is per-row keys and values
(the MTP head's over every row, the drafter's context over its sink and window), each row depending only on
the tokens before it, so a deposit keeps only the rows past the deposit of an entry it extends, which an
evicted entry keeps while a later deposit reads it.

Memory is bounded by bytes (least recently used first out); an entry larger than the budget is not
stored. Entries are namespaced by a scope (the API key) unless the operator shares them. Stored arrays
are copies: a live cache never aliases a stored one.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from .rows import READS_ALL, HeldRows, Reads, Rows, Window, copied, hold


@dataclass
class PrefixRows:
    """One entry's own rows (`start` up to its end): what a longer prompt's state extends. Of the hidden states
    and captured layers only the spans the store's windows read are held (row numbers from the prompt's start)."""

    start: int
    kv: dict[int, tuple[mx.array, mx.array]]   # attention layer -> keys, values (B, heads, rows, dim)
    hidden: HeldRows                            # final hidden states
    layers: dict[int, HeldRows]                 # captured layer -> its outputs

    @property
    def nbytes(self) -> int:
        return (sum(k.nbytes + v.nbytes for k, v in self.kv.values()) + self.hidden.nbytes
                + sum(a.nbytes for a in self.layers.values()))

    def arrays(self) -> list[mx.array]:
        return [a for kv in self.kv.values() for a in kv] + self.hidden.arrays() + \
            [a for rows in self.layers.values() for a in rows.arrays()]


@dataclass(eq=False)
class Deposit:
    """An engine's per-row state after rows 0..`end` (arrays whose first axis is the prompt's rows, of which a
    state holds those `window` reads at `end`), deposited on an entry and held as its rows past `base`: the
    deposit of an entry whose tokens this one's extend (None: from row 0). A state at `end` reads of the rows
    before `base.end` only what the base's own state held, so the chain holds every row it needs."""

    base: Deposit | None
    end: int
    window: Window
    rows: list[HeldRows]   # per array, its own rows
    users: int = 0         # deposits whose base this is: they read its rows, so they stay while it is evicted

    @property
    def nbytes(self) -> int:
        return sum(r.nbytes for r in self.rows)

    def held(self) -> list[Rows]:
        """Every array's rows a state at `end` holds, gathered along the chain."""
        parts = _first_to_last(self, lambda deposit: deposit.base)
        return [_chained(self.end, [p.rows[i] for p in parts], self.window) for i in range(len(self.rows))]


@dataclass(eq=False)
class PrefixEntry:
    scope: str
    tokens: tuple[int, ...]
    parent: PrefixEntry | None        # the entry whose rows come before this one's (None: from row 0)
    rows: PrefixRows
    # every other layer's cache after `tokens` (the GDN conv + recurrence), owned by the store; None once
    # evicted: the entry is then hollow, its rows kept for the entries that extend it
    states: dict[int, Any] | None
    state_bytes: int
    # engine name -> that engine's own state built from these rows (MTP head KV, drafter context),
    # deposited by the first request of that engine to reach this boundary
    extras: dict[str, Deposit] = field(default_factory=dict)
    kids: list[PrefixEntry] = field(default_factory=list)   # entries whose parent this is

    @property
    def children(self) -> int:
        return len(self.kids)

    @property
    def end(self) -> int:
        return len(self.tokens)

    @property
    def extra_bytes(self) -> int:
        return sum(deposit.nbytes for deposit in self.extras.values())

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.state_bytes + self.extra_bytes

    def chain(self) -> list[PrefixEntry]:
        """The entries whose rows make up this one's prefix, first to last."""
        return _first_to_last(self, lambda entry: entry.parent)


@dataclass
class PrefixStats:
    lookups: int = 0
    hits: int = 0
    cached_tokens: int = 0            # prompt tokens served from the cache
    evictions: int = 0
    inserts: int = 0


def _first_to_last(last: Any, before: Callable[[Any], Any]) -> list:
    """`last` and what it extends (`before`, until None), first to last."""
    out = []
    while last is not None:
        out.append(last)
        last = before(last)
    return out[::-1]


def _kv_layer(cache: Any) -> bool:
    """A plain attention cache, whose rows are a prefix of any longer prompt's (other kinds are kept whole)."""
    return type(cache) is KVCache


def _joined(parts: list[mx.array], axis: int) -> mx.array:
    return mx.concatenate(parts, axis=axis) if len(parts) > 1 else mx.array(parts[0])


def _chained(end: int, parts: list[HeldRows], window: Window) -> Rows:
    """What `window` reads of the rows `parts` hold together (each numbered from the prompt's start), as copies."""
    spans = tuple(span for part in parts for span in part.spans)
    return hold(HeldRows(end, spans), window)


def _own(rows: Rows, start: int, end: int, window: Window, read_at: int) -> HeldRows:
    """What `window` reads of rows start..end at the end of a prompt of `read_at` rows."""
    return copied(rows, end, window.spans(start, end, read_at))


class PrefixCache:
    """LRU by bytes over exact prefix snapshots whose rows are shared along prefixes; thread-safe (the
    worker writes, scrapes read)."""

    def __init__(self, max_bytes: int, capture: tuple[int, ...], min_tokens: int = 16, reads: Reads = READS_ALL):
        self.max_bytes = max_bytes
        self.capture = capture            # layers every entry keeps (the union of the engines' needs)
        self.reads = reads                # the rows of them any engine reads (the union of the engines' windows)
        self.min_tokens = min_tokens      # shorter prefixes cost less to prefill than to snapshot
        # entries a request can resume from, least recently used first
        self.entries: OrderedDict[tuple[str, tuple[int, ...]], PrefixEntry] = OrderedDict()
        self.nodes: dict[tuple[str, tuple[int, ...]], PrefixEntry] = {}   # those and the hollow ones
        self.bytes = 0
        self.stats = PrefixStats()
        self._lock = threading.Lock()

    def lookup(self, scope: str, tokens: Sequence[int]) -> PrefixEntry | None:
        """The longest stored prefix of `tokens` in `scope` (most recently used on a hit)."""
        key_tokens = tuple(int(t) for t in tokens)
        with self._lock:
            self.stats.lookups += 1
            best = self._longest(self.entries.values(), scope, key_tokens)
            if best is not None:
                # a hit reads its ancestors' rows too; those that several entries extend (a system prompt that
                # conversations and sub-agents share) stay hits themselves while they are read
                for e in best.chain():
                    if e is best or (len(e.kids) > 1 and e.states is not None):
                        self.entries.move_to_end((e.scope, e.tokens))
                self.stats.hits += 1
                self.stats.cached_tokens += best.end
            return best

    @staticmethod
    def _longest(entries, scope: str, tokens: tuple[int, ...]) -> PrefixEntry | None:
        best: PrefixEntry | None = None
        for entry in entries:
            n = entry.end
            if entry.scope == scope and n <= len(tokens) and (best is None or n > best.end) \
                    and tokens[:n] == entry.tokens:
                best = entry
        return best

    def restore(self, entry: PrefixEntry, cache: list) -> tuple[Rows, dict[int, Rows]]:
        """Put the state after `entry.tokens` into `cache` (a request's fresh caches, one per layer); returns
        the prefix rows' hidden states and captured layers, where the store's windows read them."""
        chain = entry.chain()
        for i, states in (entry.states or {}).items():
            cache[i] = copy.deepcopy(states)
        for i in chain[-1].rows.kv:
            keys = _joined([e.rows.kv[i][0] for e in chain], axis=2)
            values = _joined([e.rows.kv[i][1] for e in chain], axis=2)
            cache[i] = KVCache()
            cache[i].state = (keys, values, entry.end)
        n = entry.end
        hidden = _chained(n, [e.rows.hidden for e in chain], self.reads.hidden)
        layers = {i: _chained(n, [e.rows.layers[i] for e in chain], self.reads.layers) for i in entry.rows.layers}
        return hidden, layers

    def insert(self, scope: str, tokens: Sequence[int], cache: list, hidden: Rows,
               layers: dict[int, Rows]) -> PrefixEntry | None:
        """Store a snapshot of the state after `tokens` (its rows past the longest stored prefix, copied
        here); None when it does not fit."""
        key = (scope, tuple(int(t) for t in tokens))
        n = len(key[1])
        if n < self.min_tokens:
            return None
        with self._lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                return self.entries[key]
            node = self.nodes.get(key)
            # a hollow entry comes back on its rows; those trimmed below what it reads (its own or those it
            # extends) are refilled from this prompt's, which the prefill holds where an entry here reads them
            stale = [e for e in node.chain() if not self._holds(e, n)] if node is not None else []
            parent = node.parent if node is not None else self._parent(scope, key[1])
        refills = {e: self._rows(e.rows.start, e.end, e.rows.kv, hidden, layers, n) for e in stale}
        states = {i: copy.deepcopy(c) for i, c in enumerate(cache) if not _kv_layer(c)}
        state_bytes = sum(c.nbytes for c in states.values())
        if node is not None:   # a hollow entry: its rows are still here, only its state comes back
            rows = node.rows
        else:
            start = parent.end if parent is not None else 0
            rows = self._rows(start, n, {i: (mx.array(c.keys[..., start:n, :]), mx.array(c.values[..., start:n, :]))
                                         for i, c in enumerate(cache) if _kv_layer(c)}, hidden, layers, n)
        refilled = sum(new.nbytes - e.rows.nbytes for e, new in refills.items())
        incoming = state_bytes + refilled + (0 if node is not None else rows.nbytes)
        # the rows it extends stay whatever else goes: with them it must fit
        if incoming + _rows_bytes(node or parent) > self.max_bytes:
            return None
        mx.eval(rows.arrays(), [c.state for c in states.values()], [new.arrays() for new in refills.values()])
        with self._lock:
            for e, new in refills.items():
                self.bytes += new.nbytes - e.rows.nbytes
                e.rows = new
            if node is None:
                node = PrefixEntry(scope, key[1], parent, rows, None, 0)
                if parent is not None:
                    parent.kids.append(node)   # held while others are evicted to make room
                self.nodes[key] = node
                self.bytes += rows.nbytes
            node.states, node.state_bytes = states, state_bytes
            self.bytes += state_bytes
            self.entries[key] = node
            self._evict(keep=1)   # the new entry is the most recent: others go first
            self.stats.inserts += 1
        return node

    def _rows(self, start: int, end: int, kv: dict, hidden: Rows, layers: dict[int, Rows], read_at: int) -> PrefixRows:
        """An entry's own rows start..end: `kv`, and copies of what the store's windows read of a prefill's hidden
        states and captured layers at the end of a prompt of `read_at` rows."""
        return PrefixRows(start, kv, _own(hidden, start, end, self.reads.hidden, read_at),
                          {i: _own(a, start, end, self.reads.layers, read_at) for i, a in layers.items()})

    def _evict(self, keep: int) -> None:
        """Least recently used first, until the bytes fit (never below `keep` entries). Lock held."""
        while len(self.entries) > keep and self.bytes > self.max_bytes:
            self._evict_entry(next(iter(self.entries.values())))
            self.stats.evictions += 1

    def _evict_entry(self, entry: PrefixEntry) -> None:
        """Drop an entry's state; its rows go too unless a later entry extends it, and the rows no entry left
        reads go from the hollow entries it extends. Lock held."""
        del self.entries[(entry.scope, entry.tokens)]
        self.bytes -= entry.state_bytes
        entry.states, entry.state_bytes = None, 0
        for engine in list(entry.extras):
            self._drop_extra(entry, engine)
        while entry is not None and entry.states is None and not entry.kids:
            del self.nodes[(entry.scope, entry.tokens)]
            self.bytes -= entry.rows.nbytes
            if entry.parent is not None:
                entry.parent.kids.remove(entry)
            entry = entry.parent
        while entry is not None:
            if entry.states is None:
                self._trim(entry)
            entry = entry.parent

    # A hollow entry's hidden states and captured layers are read only by the entries that extend it, each at
    # its own end's windows: the shortest of them reads the most. Past that the rows can go; an entry whose
    # rows were so trimmed serves a new one only where it still holds what that one reads.
    def _trim(self, entry: PrefixEntry) -> None:
        need = _shortest_reader(entry)
        if need is None:
            return
        rows, n = entry.rows, entry.end
        before = rows.nbytes
        rows.hidden = _narrowed(rows.hidden, self.reads.hidden.spans(rows.start, n, need))
        rows.layers = {i: _narrowed(held, self.reads.layers.spans(rows.start, n, need))
                       for i, held in rows.layers.items()}
        self.bytes -= before - rows.nbytes

    def _serves(self, entry: PrefixEntry, end: int) -> bool:
        """Whether `entry`'s rows, and those it extends, hold what an entry ending at `end` reads of them."""
        return all(self._holds(e, end) for e in entry.chain())

    def _holds(self, entry: PrefixEntry, end: int) -> bool:
        """Whether `entry`'s own rows hold what an entry ending at `end` reads of them."""
        return all(held.holds(a, b) for held, window in ((entry.rows.hidden, self.reads.hidden),
                                                          *((h, self.reads.layers) for h in entry.rows.layers.values()))
                   for a, b in window.spans(entry.rows.start, entry.end, end))

    def _parent(self, scope: str, tokens: tuple[int, ...]) -> PrefixEntry | None:
        """The longest entry (hollow or not) that `tokens` extend and whose rows serve them."""
        found = [e for e in self.nodes.values() if e.scope == scope and e.end < len(tokens)
                 and tokens[:e.end] == e.tokens]
        return next((e for e in sorted(found, key=lambda e: -e.end) if self._serves(e, len(tokens))), None)

    def add_extra(self, entry: PrefixEntry, engine: str, window: Window, arrays: list[Rows]) -> None:
        """Attach an engine's state after the entry's rows (`arrays`: what `window` reads of them, rows first), as
        the rows past the deposit of an entry it extends (copies); evicts others to fit."""
        end = arrays[0].shape[0]
        with self._lock:
            if engine in entry.extras or (entry.scope, entry.tokens) not in self.entries:
                return
            base = next((e.extras[engine] for e in entry.chain()[-2::-1] if engine in e.extras), None)
            if base is not None and (base.window != window or base.end > end):
                base = None
        spans = window.spans(base.end if base is not None else 0, end, end)
        deposit = Deposit(base, end, window, [copied(a, end, spans) for a in arrays])
        mx.eval([a for rows in deposit.rows for a in rows.arrays()])
        with self._lock:
            if engine in entry.extras or (entry.scope, entry.tokens) not in self.entries \
                    or _alone(entry) + deposit.nbytes > self.max_bytes:
                return
            if base is not None:
                if not any(e.extras.get(engine) is base for e in entry.chain()):
                    return   # its base went meanwhile
                base.users += 1
            entry.extras[engine] = deposit
            self.bytes += deposit.nbytes
            self.entries.move_to_end((entry.scope, entry.tokens))
            self._evict(keep=1)   # the grown entry is the most recent: others go first

    def extra(self, entry: PrefixEntry, engine: str) -> list[Rows] | None:
        """The rows of the state `engine` deposited on `entry` (None: none)."""
        with self._lock:
            deposit = entry.extras.get(engine)
            return deposit.held() if deposit is not None else None

    def _drop_extra(self, entry: PrefixEntry, engine: str) -> None:
        """An evicted entry's deposit goes unless later deposits read its rows; the rows it read of its base go
        with it where nothing else reads them. Lock held."""
        while entry is not None:
            deposit = entry.extras[engine]
            if deposit.users > 0:
                return
            del entry.extras[engine]
            self.bytes -= deposit.nbytes
            base = deposit.base
            if base is None:
                return
            base.users -= 1
            entry = next(e for e in entry.chain() if e.extras.get(engine) is base)
            if entry.states is not None:   # still an entry: its deposit stays with it
                return

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self.nodes.clear()
            self.bytes = 0


def _rows_bytes(entry: PrefixEntry | None) -> int:
    """Bytes of the rows up to `entry`'s end, its own and those it extends."""
    return sum(e.rows.nbytes for e in entry.chain()) if entry is not None else 0


def _alone(entry: PrefixEntry) -> int:
    """Bytes the store holds for `entry` when every other entry is gone."""
    return _rows_bytes(entry) + entry.state_bytes + entry.extra_bytes


def _shortest_reader(entry: PrefixEntry) -> int | None:
    """The end of the shortest entry that can be restored and extends `entry` (None: none left)."""
    ends = [kid.end if kid.states is not None else _shortest_reader(kid) for kid in entry.kids]
    return min((e for e in ends if e is not None), default=None)


def _narrowed(held: HeldRows, spans: list[tuple[int, int]]) -> HeldRows:
    """`held` cut to `spans` (which it covers)."""
    if [(a, a + block.shape[0]) for a, block in held.spans] == spans:
        return held
    kept = copied(held, held.length, spans)
    mx.eval(kept.arrays())
    return kept
