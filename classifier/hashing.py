"""Vectorised n-gram hashing in numpy: every char n-gram and word of a text hashed in one pass.

A polynomial prefix hash over the code points (wrapping uint64 arithmetic) gives the hash of any
span in O(1), so all char n-grams and all words come out of a few array operations instead of a
Python loop per token. That is what keeps a 4k-character prompt well under a millisecond.
The hash is fixed by the constants below: changing any of them invalidates a saved model.
"""

from __future__ import annotations

import numpy as np

_BASE = np.uint64(0x100000001B3)  # odd, so it is invertible modulo 2**64
_BASE_INV = np.uint64(pow(0x100000001B3, -1, 2**64))
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_PAIR = np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)

MAX_SPAN_CHARS = 1 << 14


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


_POW = _powers(_BASE, MAX_SPAN_CHARS + 1)
_POW_INV = _powers(_BASE_INV, MAX_SPAN_CHARS + 1)


def bucket(hashes: np.ndarray, bits: int) -> np.ndarray:
    """Multiply-shift: the top `bits` bits of hash * odd constant pick the column."""
    return ((hashes * _MIX1) >> np.uint64(64 - bits)).astype(np.int64)


def mix(values: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: spreads nearby polynomial hashes over all 64 bits."""
    x = values ^ (values >> _S30)
    x = x * _MIX1
    x = x ^ (x >> _S27)
    x = x * _MIX2
    return x ^ (x >> _S31)


def codepoints(text: str) -> np.ndarray:
    """Code points of `text` (at most MAX_SPAN_CHARS of them) as uint64."""
    return np.frombuffer(text[:MAX_SPAN_CHARS].encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)


def prefix_hash(points: np.ndarray) -> np.ndarray:
    """H[i] = sum_{j<i} (c_j + 1) * BASE**j  (mod 2**64); length len(points) + 1."""
    prefix = np.zeros(points.size + 1, dtype=np.uint64)
    np.cumsum((points + np.uint64(1)) * _POW[: points.size], out=prefix[1:])
    return prefix


def span_hashes(prefix: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Hash of each span [start, end), independent of where the span sits in the text."""
    return (prefix[ends] - prefix[starts]) * _POW_INV[starts]


def char_ngram_hashes(prefix: np.ndarray, n: int, salt: int) -> np.ndarray:
    length = prefix.size - 1
    if length < n:
        return np.empty(0, dtype=np.uint64)
    starts = np.arange(length - n + 1)
    return span_hashes(prefix, starts, starts + n) + np.uint64(salt)


def word_spans(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start/end of maximal runs of word characters: ASCII letters, digits, '_' and any non-ASCII."""
    c = points
    is_word = (
        ((c >= 97) & (c <= 122)) | ((c >= 65) & (c <= 90)) | ((c >= 48) & (c <= 57)) | (c == 95) | (c >= 128)
    )
    edges = np.diff(np.concatenate(([False], is_word, [False])).astype(np.int8))
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


Tokens = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # code points, prefix hash, word starts, word ends


def tokens(text: str) -> Tokens:
    """Everything the word hashes of `text` are computed from (salt-independent, so shared between blocks)."""
    points = codepoints(text)
    starts, ends = word_spans(points)
    return points, prefix_hash(points), starts, ends


def word_unigrams(prefix: np.ndarray, starts: np.ndarray, ends: np.ndarray, salt: int) -> np.ndarray:
    return mix(span_hashes(prefix, starts, ends) + np.uint64(salt))


def with_bigrams(words: np.ndarray) -> np.ndarray:
    """Word hashes followed by the hashes of adjacent word pairs."""
    if words.size < 2:
        return words
    return np.concatenate((words, mix(words[:-1] * _PAIR + words[1:])))


def word_hashes(prefix: np.ndarray, starts: np.ndarray, ends: np.ndarray, salt: int, bigrams: bool) -> np.ndarray:
    words = word_unigrams(prefix, starts, ends, salt)
    return with_bigrams(words) if bigrams else words
