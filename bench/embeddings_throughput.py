"""Embeddings throughput: short texts sharing a right-padded forward against one forward each, side by side.

    python -m bench.embeddings_throughput [--model demo|random-0.8b|DIR] [--dtype D] [--texts 64] [--rounds 3] [--json FILE]

The texts are real prompts of the classifier's shipped set, cut to two shapes a RAG client sends: queries
(the first 12 words) and passages (the first 120 words), tokenized by the demo's tokenizer (a random model's
vocabulary holds its ids). Each round embeds the same texts both ways through `engines.embed.embeddings` (the
shared forwards, and BATCH_ROWS = 1: every text its own forward), alternating which goes first, and checks
that both give the same vectors. Prints texts/s and tokens/s of each and their ratio
(median over rounds). Where a forward is bound by reading the weights and launching kernels (a GPU), a batch
of short texts costs about one forward; on the CPU a forward costs its rows, padding ones included, which is
why the server shares forwards on a GPU only (engines.embed.shared_rows).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np
from mlx_lm.tokenizer_utils import load as load_tokenizer

import engines.embed as embed
from bench.environment import as_served, describe_environment, print_table, record
from bench.profile_verify import add_served_model_arguments, served_model
from classifier.dataset_io import DEFAULT_DATASET
from engines.bundle import ModelBundle
from engines.checkpoint import DEMO_FAMILY
from engines.prefill import PREFILL_CHUNK

SHAPES = {"query": 12, "passage": 120}   # words kept of each prompt
SHARED = PREFILL_CHUNK   # the GPU's sharing, forced here on any device (the CPU serves each text alone)


def texts_of(shape_words: int, count: int, seed: int = 0) -> list[str]:
    prompts = [json.loads(line).get("text") or "" for line in DEFAULT_DATASET.open()]
    long_enough = [p for p in prompts if len(p.split()) >= shape_words]
    return [" ".join(p.split()[:shape_words]) for p in random.Random(seed).sample(long_enough, count)]


def _timed(bundle: ModelBundle, inputs: list[list[int]], rows: int) -> tuple[float, dict[int, np.ndarray]]:
    saved, embed.BATCH_ROWS = embed.BATCH_ROWS, rows
    try:
        start = time.perf_counter()
        vectors: dict[int, np.ndarray] = {}
        for item in embed.embeddings(bundle, inputs):
            if isinstance(item, dict):
                vectors.update(item)
        return time.perf_counter() - start, vectors
    finally:
        embed.BATCH_ROWS = saved


def measure(bundle: ModelBundle, tokenizer, texts: list[str], rounds: int) -> dict:
    inputs = [list(tokenizer.encode(t, add_special_tokens=False)) for t in texts]
    tokens = sum(map(len, inputs))
    _timed(bundle, inputs[:4], SHARED)   # warm-up: compiled shapes, caches
    alone, batched, gap = [], [], 0.0
    for r in range(rounds):
        order = [("alone", 1), ("batched", SHARED)]
        for name, rows in order if r % 2 == 0 else order[::-1]:
            seconds, vectors = _timed(bundle, inputs, rows)
            (alone if name == "alone" else batched).append((seconds, vectors))
        gap = max(gap, max(float(np.abs(alone[-1][1][i] - batched[-1][1][i]).max()) for i in range(len(inputs))))
    a = statistics.median(s for s, _ in alone)
    b = statistics.median(s for s, _ in batched)
    return {"texts": len(texts), "tokens": tokens, "alone_texts_per_s": len(texts) / a,
            "batched_texts_per_s": len(texts) / b, "alone_tokens_per_s": tokens / a, "batched_tokens_per_s": tokens / b,
            "speedup": a / b, "max_abs_difference": gap}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_served_model_arguments(parser)
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    bundle = served_model(args)
    tokenizer = load_tokenizer(DEMO_FAMILY / "target")
    results = {shape: measure(bundle, tokenizer, texts_of(words, args.texts), args.rounds) for shape, words in SHAPES.items()}
    results["model"] = args.model
    results["environment"] = describe_environment()
    record(results, args.json)
    print_table(["texts", "tokens", "one forward each: texts/s", "shared forwards: texts/s", "speedup", "max |diff|"],
                [[f"{args.texts} {shape}", str(row["tokens"]), f"{row['alone_texts_per_s']:.1f}",
                  f"{row['batched_texts_per_s']:.1f}", f"{row['speedup']:.2f}x", f"{row['max_abs_difference']:.1e}"]
                 for shape, row in ((shape, results[shape]) for shape in SHAPES)])
    return 0


if __name__ == "__main__":
    as_served()
    raise SystemExit(main())
