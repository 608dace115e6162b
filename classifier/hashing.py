"""Vectorised n-gram hashing in numpy: every char n-gram and word of a text hashed in one pass.

A polynomial prefix hash over the code points (wrapping uint64 arithmetic) gives the hash of any
span in O(1), so all char n-grams and all words come out of a few array operations instead of a
Python loop per token. The hash is fixed by the constants below: changing any of them
invalidates a saved model.

This runs on every request, where the cost is mostly the number of numpy calls (~1-2 us each)
rather than the text's length: `join` tokenises all the texts a request is read through (primary
text, ask, history) in one pass, since a span hashes the same wherever it sits; `ngram_hashes`
gets the char n-grams by Horner's rule, without a prefix hash; `KeyIndex` replaces binary searches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

_BASE = np.uint64(0x100000001B3)  # odd, so it is invertible modulo 2**64
_BASE_INV = np.uint64(pow(0x100000001B3, -1, 2**64))
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_PAIR = np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)

MAX_SPAN_CHARS = 1 << 14
MAX_JOINED_TEXTS = 5  # `join` reads at most this many texts of MAX_SPAN_CHARS each (featurize: 5)


def _powers(base: np.uint64, count: int) -> np.ndarray:
    out = np.empty(count, dtype=np.uint64)
    out[0] = 1
    # repeated doubling keeps this vectorised: out[k:2k] = out[:k] * base**k
    filled, step = 1, base
    with np.errstate(over="ignore"):
        while filled < count:
            take = min(filled, count - filled)
            out[filled : filled + take] = out[:take] * step
            filled += take
            step = np.uint64((int(step) * int(step)) % 2**64)
    return out


# Long enough for `join`'s texts and separators; only the length of the tables, not the hash.
_TABLE_SIZE = MAX_JOINED_TEXTS * (MAX_SPAN_CHARS + 1) + 2
_POW = _powers(_BASE, _TABLE_SIZE)
_POW_INV = _powers(_BASE_INV, _TABLE_SIZE)

# Word characters: ASCII letters, digits, '_' and any non-ASCII (index 128 stands for all of those).
_WORD_CHAR = np.zeros(129, dtype=bool)
_WORD_CHAR[[ord(ch) for ch in "_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"]] = True
_WORD_CHAR[128] = True


_NOT_MAPPED = np.uint32(0xFFFFFFFF)


def _lowercase_table() -> np.ndarray:
    """str.lower of each code point of the BMP as a code point, for `join(lower=True)`. Three read
    _NOT_MAPPED, for str.lower to handle: U+0130 (its lower case is two characters), U+03A3 (the
    final-sigma rule looks at the next character) and U+FFFF (what code points past the BMP are
    clipped to). Every other character lower-cases to one character whatever surrounds it."""
    table = np.arange(1 << 16, dtype=np.uint32)
    text = table.tobytes().decode("utf-32-le", "surrogatepass").replace("\u0130", "\0").replace("\u03a3", "\0")
    lowered = text.lower()
    if len(lowered) != len(text):
        raise RuntimeError("a character of the BMP lower-cases to several: update _lowercase_table")
    table = np.frombuffer(lowered.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).copy()
    table[[0x130, 0x3A3, 0xFFFF]] = _NOT_MAPPED
    return table


_LOWER = _lowercase_table()  # 256 KB, ~3 ms at import


def bucket(hashes: np.ndarray, bits: int) -> np.ndarray:
    """Multiply-shift: the top `bits` bits of hash * odd constant pick the column."""
    return ((hashes * _MIX1) >> np.uint64(64 - bits)).astype(np.int64)


def bucket_runs(
    hashes: np.ndarray, sizes: Sequence[int], bits: Sequence[int], starts: Sequence[int], dtype: type = np.int32
) -> np.ndarray:
    """Column of each hash, as `dtype` (wide enough for every column): `bucket` of run i (the next
    sizes[i] hashes) into bits[i] bits, plus starts[i]. Overwrites `hashes` (in place: no temporary arrays)."""
    hashes *= _MIX1
    lo = 0
    for size, n_bits, start in zip(sizes, bits, starts):
        run = hashes[lo : lo + size]
        run >>= np.uint64(64 - n_bits)
        if start:
            run += np.uint64(start)
        lo += size
    return hashes.astype(dtype)


def mix(values: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: spreads nearby polynomial hashes over all 64 bits."""
    x = values ^ (values >> _S30)
    x *= _MIX1  # in place: one new array instead of five
    x ^= x >> _S27
    x *= _MIX2
    x ^= x >> _S31
    return x


def codepoints(text: str) -> np.ndarray:
    """Code points of `text` (at most MAX_SPAN_CHARS of them) as uint64."""
    return np.frombuffer(text[:MAX_SPAN_CHARS].encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)


def prefix_hash(points: np.ndarray) -> np.ndarray:
    """H[i] = sum_{j<i} (c_j + 1) * BASE**j  (mod 2**64); length len(points) + 1."""
    prefix = np.zeros(points.size + 1, dtype=np.uint64)
    ((points + np.uint64(1)) * _POW[: points.size]).cumsum(out=prefix[1:])  # the method: np.cumsum wraps it in Python
    return prefix


def span_hashes(prefix: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Hash of each span [start, end), independent of where the span sits in the text."""
    return (prefix.take(ends) - prefix.take(starts)) * _POW_INV.take(starts)  # take: ~2x faster than [ ]


def ngram_sizes(length: int, ns: Sequence[int]) -> list[int]:
    """How many n-grams of each order a text of `length` code points has."""
    return [max(length - n + 1, 0) for n in ns]


def ngram_hashes(points: np.ndarray, ns: Sequence[int], salts: Sequence[int], out: np.ndarray | None = None) -> np.ndarray:
    """`char_ngram_hashes` for each n of `ns` (salted with `salts`), one order after the other
    (into `out` when given), straight from the code points by Horner's rule:
    hash_n[i] = (c_i + 1) + BASE * hash_{n-1}[i + 1]. Two array operations per order, no prefix hash."""
    sizes = ngram_sizes(points.size, ns)
    out = np.empty(sum(sizes), dtype=np.uint64) if out is None else out
    where, lo = {}, 0
    for n, salt, size in zip(ns, salts, sizes):
        where[n] = (out[lo : lo + size], np.uint64(salt))
        lo += size
    ones = np.add(points, 1, dtype=np.uint64)
    hashes = ones
    for n in range(1, max(ns, default=0) + 1):
        if n > 1:
            hashes = hashes[1:] * _BASE
            hashes += ones[: hashes.size]
        if n in where:
            np.add(hashes, where[n][1], out=where[n][0])
    return out


def char_ngram_hashes(prefix: np.ndarray, n: int, salt: int) -> np.ndarray:
    length = prefix.size - 1
    if length < n:
        return np.empty(0, dtype=np.uint64)
    starts = np.arange(length - n + 1)
    return span_hashes(prefix, starts, starts + n) + np.uint64(salt)


def word_spans(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start/end of maximal runs of word characters: ASCII letters, digits, '_' and any non-ASCII."""
    flags = np.zeros(points.size + 2, dtype=bool)  # a non-word character on either side
    flags[1:-1] = _WORD_CHAR.take(points, mode="clip")  # clip: any code point >= 128 reads entry 128
    changes = (flags[1:] != flags[:-1]).nonzero()[0]  # run starts and ends alternate
    return changes[0::2], changes[1::2]


class KeyIndex:
    """Rows of query hashes among sorted, unique, mixed uint64 keys: a table indexed by a hash's
    top `bits` bits holds the row of the one key in that slot; only queries in a slot that several
    keys share are binary searched. numpy's searchsorted costs 50-120 ns a query on a 2-core Xeon,
    which made it the largest single cost of the cue and word-vector lookups."""

    def __init__(self, keys: np.ndarray, bits: int):
        if keys.size and not np.all(keys[1:] > keys[:-1]):
            raise ValueError("KeyIndex keys must be sorted and unique")
        self.keys = keys
        self._shift = np.uint64(64 - bits)
        slots = keys >> self._shift  # sorted, like the keys
        # An empty slot holds row 0, which is safe: keys[0]'s own slot is not empty, so a query that
        # lands in an empty slot cannot equal keys[0], and the final comparison turns it down.
        self._table = np.zeros(1 << bits, dtype=np.int32)
        self._table[slots] = np.arange(keys.size, dtype=np.int32)
        self._table[slots[1:][slots[1:] == slots[:-1]]] = -1  # shared: binary search

    def find(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of the queries that are keys, and their rows (in query order)."""
        rows = self._table.take(queries >> self._shift)
        shared = (rows < 0).nonzero()[0]
        if shared.size:
            rows[shared] = self.keys.searchsorted(queries.take(shared))
        found = (self.keys.take(rows, mode="clip") == queries).nonzero()[0]  # clip: a search past the end
        return found, rows.take(found)


Tokens = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # code points, prefix hash, word starts, word ends


def tokens(text: str) -> Tokens:
    """Everything the word hashes of `text` are computed from (salt-independent, so shared between blocks)."""
    points = codepoints(text)
    starts, ends = word_spans(points)
    return points, prefix_hash(points), starts, ends


def word_unigrams(prefix: np.ndarray, starts: np.ndarray, ends: np.ndarray, salt: int) -> np.ndarray:
    return mix(span_hashes(prefix, starts, ends) + np.uint64(salt))


def pair_hashes(words: np.ndarray) -> np.ndarray:
    """Hashes of adjacent word pairs (the bigram hash; empty for fewer than two words)."""
    return mix(words[:-1] * _PAIR + words[1:])


def with_bigrams(words: np.ndarray) -> np.ndarray:
    """Word hashes followed by the hashes of adjacent word pairs."""
    if words.size < 2:
        return words
    return np.concatenate((words, pair_hashes(words)))


def word_hashes(prefix: np.ndarray, starts: np.ndarray, ends: np.ndarray, salt: int, bigrams: bool) -> np.ndarray:
    words = word_unigrams(prefix, starts, ends, salt)
    return with_bigrams(words) if bigrams else words


@dataclass(slots=True)  # not frozen: a frozen dataclass costs ~1.5 us to build, per request
class Joined:
    """Several texts tokenised in one pass: code points, prefix hash and word spans of
    "\n" + text_0 + "\n" + text_1 + ... + "\n". No word or n-gram crosses a newline, and a span
    hashes the same wherever it sits, so every hash equals the one of the text on its own."""

    points: np.ndarray  # uint32 code points of the joined text
    prefix: np.ndarray  # prefix_hash(points)
    starts: np.ndarray  # word starts and ends (positions in points), all texts
    ends: np.ndarray
    char_bounds: tuple[int, ...]  # text i is points[char_bounds[i] : char_bounds[i + 1] - 1]
    word_bounds: tuple[int, ...]  # its words are starts[word_bounds[i] : word_bounds[i + 1]]

    def chars(self, i: int) -> tuple[int, int]:
        return self.char_bounds[i], self.char_bounds[i + 1] - 1

    def words(self, i: int) -> tuple[int, int]:
        return self.word_bounds[i], self.word_bounds[i + 1]

    def span_hashes(self, first: int, stop: int) -> np.ndarray:
        """Unsalted hashes of the words of texts first .. stop - 1 (salt and `mix` make word hashes)."""
        lo, hi = self.word_bounds[first], self.word_bounds[stop]
        return span_hashes(self.prefix, self.starts[lo:hi], self.ends[lo:hi])


def _encode(texts: Sequence[str]) -> np.ndarray:
    """Code points of "\n" + text_0 + "\n" + ... + "\n" (uint32)."""
    return np.frombuffer("\n".join(["", *texts, ""]).encode("utf-32-le"), dtype=np.uint32)


def _lower_points(points: np.ndarray) -> np.ndarray | None:
    """`points` lower-cased as str.lower would, or None where the table cannot say (`_LOWER`)."""
    lowered = _LOWER.take(points, mode="clip")  # clip: past the BMP reads U+FFFF's _NOT_MAPPED
    return None if np.maximum.reduce(lowered) == _NOT_MAPPED else lowered


def join(texts: Sequence[str], lower: bool = False) -> Joined:
    """Tokenise `texts` (each cut to MAX_SPAN_CHARS, as `codepoints` does) in one pass; lower-cased
    first (str.lower) with `lower`. For text other than ASCII the lower-casing is a table lookup on
    the code points where that gives what str.lower gives: str.lower costs ~4.5 ns a character
    there (18 us for a 4k prompt, then the edge text again), the lookup 4-5 us for all the texts."""
    if len(texts) > MAX_JOINED_TEXTS:
        raise ValueError(f"join reads at most {MAX_JOINED_TEXTS} texts")
    points = None
    if lower and not all(map(str.isascii, texts)):  # the table keeps lengths: cutting first is the same
        points = _lower_points(_encode([text[:MAX_SPAN_CHARS] for text in texts]))
    if lower and points is None:
        texts = [text.lower() for text in texts]
    texts = [text[:MAX_SPAN_CHARS] for text in texts]
    if points is None:
        points = _encode(texts)
    bounds, position = [], 1
    for text in texts:
        bounds.append(position)
        position += len(text) + 1
    bounds.append(position)
    # the joined text starts and ends with a newline, so no padding is needed to find the runs
    is_word = _WORD_CHAR.take(points, mode="clip")
    changes = (is_word[1:] != is_word[:-1]).nonzero()[0] + 1
    starts, ends = changes[0::2], changes[1::2]
    word_bounds = starts.searchsorted(bounds).tolist()
    return Joined(points, prefix_hash(points), starts, ends, tuple(bounds), tuple(word_bounds))
