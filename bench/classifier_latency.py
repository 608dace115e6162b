"""Classifier latency: model load time and predict p50/p99 for 100 / 1k / 4k-character prompts.

    PYTHONPATH=. python bench/classifier_latency.py [--runs 2000] [--json]

Prompts are cut from the shipped prompt set (all three classes, pasted code and data included),
padded by joining prompts where one is too short, so every length is measured on real text.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import time

import numpy as np

from classifier.dataset_io import DEFAULT_DATASET
from classifier.model import Classifier
from contracts.request_text import RequestText

LENGTHS = (100, 1000, 4000)


def prompts_of_length(texts: list[str], length: int, count: int, rng: random.Random) -> list[str]:
    out = []
    for _ in range(count):
        text = rng.choice(texts)
        while len(text) < length:
            text += "\n\n" + rng.choice(texts)
        out.append(text[:length])
    return out


def measure(classifier: Classifier, prompts: list[str], runs: int) -> tuple[np.ndarray, np.ndarray]:
    """Wall-clock and thread-CPU milliseconds per predict call.

    CPU time excludes the time the thread waited for a core, which on a shared box is what
    inflates the wall-clock tail; both are reported.
    """
    for text in prompts[:50]:  # warm-up
        classifier.predict(RequestText(user=text))
    wall, cpu = np.empty(runs), np.empty(runs)
    gc.disable()
    try:
        for i in range(runs):
            text = prompts[i % len(prompts)]
            cpu_start, start = time.thread_time_ns(), time.perf_counter_ns()
            classifier.predict(RequestText(system="You are a helpful assistant.", user=text))
            wall[i], cpu[i] = time.perf_counter_ns() - start, time.thread_time_ns() - cpu_start
    finally:
        gc.enable()
    return wall / 1e6, cpu / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    loads = []
    for _ in range(5):
        start = time.perf_counter()
        classifier = Classifier.load()
        loads.append(time.perf_counter() - start)
    texts = [json.loads(line).get("text") or "" for line in DEFAULT_DATASET.open()]
    texts = [t for t in texts if t]
    rng = random.Random(0)
    results: dict = {"load_s_median": statistics.median(loads), "load_avg_1m": os.getloadavg()[0]}
    for length in LENGTHS:
        wall, cpu = measure(classifier, prompts_of_length(texts, length, 200, rng), args.runs)
        results[f"{length}_chars"] = {
            "p50_ms": float(np.percentile(wall, 50)),
            "p99_ms": float(np.percentile(wall, 99)),
            "cpu_p50_ms": float(np.percentile(cpu, 50)),
            "cpu_p99_ms": float(np.percentile(cpu, 99)),
        }
    if args.json:
        print(json.dumps(results))
        return
    print(f"model load: {results['load_s_median'] * 1e3:.1f} ms (median of 5); "
          f"{os.cpu_count()} CPUs, load average {results['load_avg_1m']:.2f}")  # fmt: skip
    print(f"{'prompt':>12} {'p50 ms':>8} {'p99 ms':>8} {'cpu p50':>8} {'cpu p99':>8}")
    for length in LENGTHS:
        row = results[f"{length}_chars"]
        print(f"{length:>8} chr {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} {row['cpu_p50_ms']:>8.3f} {row['cpu_p99_ms']:>8.3f}")


if __name__ == "__main__":
    main()
