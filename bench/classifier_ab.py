"""Classifier A/B: this tree's predict against another commit's, interleaved in one process.

    PYTHONPATH=. python -m bench.classifier_ab [--base main] [--rounds 10] [--check]

The base commit's `classifier/` is exported (`git archive`) into a temporary directory as the
package `classifier_base` (its imports rewritten), so both featurizers run in the same process
on the same prompts, alternating round by round: on a shared box, load from other jobs then
hits both alike. Prints p50 / p99 of wall-clock and thread-CPU time per predict.
--check instead compares both featurizers' rows and probabilities on every shipped prompt (and
random texts), which is what a pure speed change must leave alone.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from bench.classifier_latency import LENGTHS, prompts_of_length
from classifier.dataset_io import DEFAULT_DATASET, REAL_DATASET
from classifier.model import Classifier
from contracts.request_text import RequestText, from_record

ROOT = Path(__file__).resolve().parent.parent
_IMPORT = re.compile(r"\b(from|import) classifier\b")


def import_base(commit: str, into: Path) -> ModuleType:
    """The `classifier` package of `commit`, importable as `classifier_base`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "classifier"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    package = into / "classifier_base"
    (into / "classifier").rename(package)
    for path in package.rglob("*.py"):
        path.write_text(_IMPORT.sub(r"\1 classifier_base", path.read_text()))
    sys.path.insert(0, str(into))
    return importlib.import_module("classifier_base.model")


def timed(classifier, requests: list[RequestText], wall: list[float], cpu: list[float]) -> None:
    gc.disable()
    try:
        for request in requests:
            cpu_start, start = time.thread_time_ns(), time.perf_counter_ns()
            classifier.predict(request)
            wall.append((time.perf_counter_ns() - start) / 1e6)
            cpu.append((time.thread_time_ns() - cpu_start) / 1e6)
    finally:
        gc.enable()


def compare_speed(base, head, rounds: int) -> dict:
    texts = [t for t in (json.loads(line).get("text") for line in DEFAULT_DATASET.open()) if t]
    rng = random.Random(0)
    out = {"load_avg_1m": os.getloadavg()[0]}
    for length in LENGTHS:
        requests = [RequestText(system="You are a helpful assistant.", user=text)
                    for text in prompts_of_length(texts, length, 200, rng)]  # fmt: skip
        times = {name: ([], []) for name in ("base", "head")}
        for model in (base, head):  # warm-up
            timed(model, requests[:50], [], [])
        for round_ in range(rounds):
            order = (("base", base), ("head", head)) if round_ % 2 == 0 else (("head", head), ("base", base))
            for name, model in order:
                timed(model, requests, *times[name])
        for name, (wall, cpu) in times.items():
            out[f"{length}_{name}"] = {
                "p50": float(np.percentile(wall, 50)),
                "p99": float(np.percentile(wall, 99)),
                "cpu_p50": float(np.percentile(cpu, 50)),
                "cpu_p99": float(np.percentile(cpu, 99)),
            }
    out["load_avg_1m_end"] = os.getloadavg()[0]
    return out


def random_text(rng: random.Random) -> str:
    pieces = ["word ", "Write a function ", "```python\ndef f(x):\n    return x\n```\n", '"""doc"""', "\n", "\n\n",
              "a, b, c\n", '{"key": 1}', "é", "中文", "  - item\n", "<a/>", "SELECT * FROM t;", "3 + 4 ",
              "? ", "(a) ", "\t", ": ", "=>"]  # fmt: skip
    text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 400)))
    return text[: rng.randrange(0, 14000)]


def check_features(base_module: ModuleType, head: Classifier, random_texts: int) -> int:
    """Rows of both featurizers on every shipped prompt and random texts; returns the mismatches."""
    features_base = importlib.import_module("classifier_base.features")
    from classifier.features import featurize

    base = base_module.Classifier.load()
    spec_base, spec_head = base.model.spec, head.model.spec
    requests = [from_record(json.loads(line)) for path in (DEFAULT_DATASET, REAL_DATASET) for line in path.open()]
    rng = random.Random(0)
    requests += [RequestText(system=random_text(rng)[:300], user=random_text(rng), history=random_text(rng)[:2000])
                 for _ in range(random_texts)]  # fmt: skip
    bad = bitwise = 0
    for number, request in enumerate(requests):
        index_a, values_a = features_base.featurize(request, spec_base)
        index_b, values_b = featurize(request, spec_head)
        probs_a, probs_b = base.model.probabilities(request), head.model.probabilities(request)
        same = np.array_equal(index_a, index_b) and np.allclose(values_a, values_b, rtol=1e-12, atol=1e-12)
        if not (same and np.allclose(probs_a, probs_b, rtol=0, atol=1e-12)):
            bad += 1
            print(f"mismatch {number}: {request.user[:60]!r}")
        bitwise += same and np.array_equal(values_a, values_b) and np.array_equal(probs_a, probs_b)
    print(f"{len(requests)} requests compared: {bad} mismatches (1e-12), "
          f"{bitwise} rows and probabilities bitwise equal")  # fmt: skip
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="commit whose classifier/ is the baseline")
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds of 200 prompts per length")
    parser.add_argument("--check", action="store_true", help="compare features instead of timing")
    parser.add_argument("--random-texts", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base_module = import_base(args.base, Path(tmp))
        head = Classifier.load()
        if args.check:
            sys.exit(1 if check_features(base_module, head, args.random_texts) else 0)
        result = compare_speed(base_module.Classifier.load(), head, args.rounds)
    print(json.dumps(result))
    print(f"load average {result['load_avg_1m']:.2f} -> {result['load_avg_1m_end']:.2f}; ms, base -> head")
    print(f"{'prompt':>10} {'p50':>15} {'p99':>15} {'cpu p50':>15} {'cpu p99':>15}")
    for length in LENGTHS:
        a, b = result[f"{length}_base"], result[f"{length}_head"]
        cells = " ".join(f"{a[k]:6.3f} -> {b[k]:5.3f}" for k in ("p50", "p99", "cpu_p50", "cpu_p99"))
        print(f"{length:>6} chr {cells}")


if __name__ == "__main__":
    main()
