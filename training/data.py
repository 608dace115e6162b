"""Token streams of the corpus domains and the batch sampler used by every training phase.

Each domain (code, prose, structured, chat) becomes one uint16 stream of its documents, each
followed by <|endoftext|>, plus the offsets where documents start. A batch row is a window of
T+1 tokens from one domain, chosen by the mixture weights; half the windows start at a document
start so the model sees beginnings (ChatML "<|im_start|>user" in particular).
"""

from __future__ import annotations

import argparse
import json
import lzma
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .family_config import EOT_ID
from .paths import in_checkout, path_option

DOMAINS = ("code", "prose", "structured", "chat")
MIXTURE = {"code": 0.36, "prose": 0.28, "structured": 0.20, "chat": 0.16}


@dataclass
class Stream:
    tokens: np.ndarray  # uint16
    doc_starts: np.ndarray  # int64 offsets into tokens


def jsonl_lines(path: Path) -> list[str]:
    """The non-blank lines of a JSONL file (.xz too), split at "\n" only: str.splitlines also breaks
    at U+2028 / U+0085, which a JSON string written with ensure_ascii=False may hold."""
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line for line in handle.read().split("\n") if line.strip()]


def read_jsonl_texts(path: Path) -> list[str]:
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle]


def stream_of(documents: list[list[int]]) -> Stream:
    """Token documents back to back, each followed by <|endoftext|> (what the samplers read)."""
    pieces, starts, offset = [], [], 0
    for ids in documents:
        ids = list(ids) + [EOT_ID]
        starts.append(offset)
        offset += len(ids)
        pieces.append(np.asarray(ids, dtype=np.uint16))
    return Stream(np.concatenate(pieces), np.asarray(starts, dtype=np.int64))


def tokenize_stream(texts: list[str], tokenizer) -> Stream:
    encodings = tokenizer.encode_batch_fast(texts) if hasattr(tokenizer, "encode_batch_fast") \
        else tokenizer.encode_batch(texts)
    return stream_of([enc.ids for enc in encodings])


def load_streams(corpus: Path, tokenizer_path: Path, split: str = "train",
                 max_docs: int | None = None) -> dict[str, Stream]:
    """split "train" reads <domain>.jsonl[.xz], "heldout" reads <domain>.heldout.jsonl[.xz]."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    streams = {}
    for domain in DOMAINS:
        stem = domain if split == "train" else f"{domain}.heldout"
        path = corpus / f"{stem}.jsonl.xz"
        if not path.exists():
            path = corpus / f"{stem}.jsonl"
        start = time.time()
        texts = read_jsonl_texts(path)[:max_docs]
        streams[domain] = tokenize_stream(texts, tokenizer)
        print(f"[data] {split:7s} {domain:10s} {len(texts):6d} docs {len(streams[domain].tokens) / 1e6:7.2f}M tokens "
              f"({time.time() - start:.1f}s)", flush=True)
    return streams


class BatchSampler:
    def __init__(self, streams: dict[str, Stream], seq_len: int, seed: int,
                 mixture: dict[str, float] = MIXTURE) -> None:
        self.streams, self.seq_len = streams, seq_len
        self.rng = np.random.default_rng(seed)
        self.domains = [d for d in DOMAINS if d in streams and len(streams[d].tokens) > seq_len + 1]
        weights = np.asarray([mixture[d] for d in self.domains])
        self.weights = weights / weights.sum()

    def window_start(self, stream: Stream) -> int:
        limit = len(stream.tokens) - self.seq_len - 1
        if self.rng.random() < 0.5:
            starts = stream.doc_starts[stream.doc_starts <= limit]
            return int(starts[self.rng.integers(len(starts))])
        return int(self.rng.integers(0, limit + 1))

    def batch(self, batch_size: int) -> np.ndarray:
        """(batch_size, seq_len + 1) int64 windows."""
        return self.batch_with_domains(batch_size)[0]

    def batch_with_domains(self, batch_size: int) -> tuple[np.ndarray, list[str]]:
        """`batch`'s windows and the domain each row was drawn from."""
        rows = np.empty((batch_size, self.seq_len + 1), dtype=np.int64)
        picks = self.rng.choice(len(self.domains), size=batch_size, p=self.weights)
        for row, pick in enumerate(picks):
            stream = self.streams[self.domains[pick]]
            start = self.window_start(stream)
            rows[row] = stream.tokens[start:start + self.seq_len + 1]
        return rows, [self.domains[pick] for pick in picks]


def eval_windows(stream: Stream, seq_len: int, max_tokens: int) -> np.ndarray:
    """Non-overlapping (n, seq_len + 1) windows from the start of a held-out stream."""
    usable = min(len(stream.tokens) - 1, max_tokens)
    count = max(usable // seq_len, 0)
    return np.stack([stream.tokens[i * seq_len:i * seq_len + seq_len + 1].astype(np.int64)
                     for i in range(count)]) if count else np.empty((0, seq_len + 1), np.int64)


def heldout_batches(heldout: dict[str, Stream], seq_len: int, max_tokens: int, batch_size: int):
    """(domain, batches) for every held-out domain with at least one window: its eval_windows split
    into about batch_size-row arrays. Every phase's evaluation reads these."""
    for domain in [d for d in DOMAINS if d in heldout]:
        windows = eval_windows(heldout[domain], seq_len, max_tokens)
        if len(windows):
            yield domain, np.array_split(windows, max(1, len(windows) // batch_size))


def pack_corpus(corpus: Path, pack_dir: Path) -> None:
    """xz-compress the jsonl files into pack_dir (the folder carried to the device)."""
    pack_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted(corpus.glob("*.jsonl")):
        xz_path = pack_dir / (path.name + ".xz")
        if not xz_path.exists() or xz_path.stat().st_mtime < path.stat().st_mtime:
            xz_path.write_bytes(lzma.compress(path.read_bytes(), preset=6))


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog, description="xz-pack a corpus folder's .jsonl files (the "
                                     "folder carried to the device)")
    path_option(parser, "--corpus", in_checkout("training", "corpus"), "folder of <domain>[.heldout].jsonl")
    parser.add_argument("--out", type=Path, default=None, help="default: CORPUS/pack")
    args = parser.parse_args(argv)
    pack_corpus(args.corpus, args.out or args.corpus / "pack")


if __name__ == "__main__":
    main()
