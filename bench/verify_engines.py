"""Engine speed before/after the verify fast paths, in ONE process: raw, mtp and ddtree budget
1/2/4/8 on the same prompts (a few per class), greedy, every (prompt, path, engine) interleaved.

    python -m bench.verify_engines [--per-class 3] [--tokens 128] [--json out.json]

Per engine and path: decode tok/s (prefill and first token excluded: that is TTFT), acceptance
(MTP: accepted/drafted; DDTree: mean accepted tokens per verify), the verify cost ratio
c = seconds per speculative cycle / seconds per raw token, and how many outputs equal raw's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import mlx.core as mx

BUDGETS = (1, 2, 4, 8)


def run_once(engine, prompt_ids: list[int], tokens: int) -> dict:
    """Decode `tokens` tokens; decode seconds exclude the first (prefill) step."""
    from contracts.engine import CancelToken
    from contracts.sampling import SamplingParams

    cancel = CancelToken()
    out: list[int] = []
    steps = drafted = accepted = 0
    decode_seconds = 0.0
    started = time.perf_counter()
    ttft = None
    for step in engine.generate(prompt_ids, SamplingParams(temperature=0.0, max_tokens=tokens), cancel):
        if ttft is None:
            ttft = time.perf_counter() - started
        else:
            steps += 1
            drafted += step.drafted
            accepted += step.accepted
            decode_seconds += step.seconds
        out.extend(step.tokens)
        if len(out) >= tokens:
            cancel.cancel()
            break
    emitted = len(out) - 1  # the first token belongs to TTFT
    return {"tokens": out[:tokens], "emitted": emitted, "seconds": decode_seconds, "steps": steps,
            "drafted": drafted, "accepted": accepted, "ttft": ttft}


def engines_for(runtime) -> dict:
    from engines.ddtree import DDTreeEngine

    engines = {"raw": runtime.engines["raw"]}
    if "mtp" in runtime.engines:
        engines["mtp"] = runtime.engines["mtp"]
    if "ddtree" in runtime.engines:
        drafter = runtime.engines["ddtree"].drafter
        for budget in BUDGETS:
            engines[f"ddtree-b{budget}"] = DDTreeEngine(runtime.bundle, drafter, budget=budget)
    return engines


def summarise(runs: list[dict], raw_runs: list[dict]) -> dict:
    emitted = sum(r["emitted"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    steps = sum(r["steps"] for r in runs)
    raw_step = sum(r["seconds"] for r in raw_runs) / max(1, sum(r["steps"] for r in raw_runs))
    return {
        "tok_s": emitted / seconds if seconds else 0.0,
        "acceptance": sum(r["accepted"] for r in runs) / max(1, sum(r["drafted"] for r in runs)),
        "accepted_per_step": sum(r["accepted"] for r in runs) / max(1, steps),
        "cost_ratio": (seconds / max(1, steps)) / raw_step if raw_step else 0.0,
        "ttft_ms": statistics.median(r["ttft"] for r in runs) * 1000,
        "equal_to_raw": sum(r["tokens"] == w["tokens"] for r, w in zip(runs, raw_runs)),
        "runs": len(runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="target dir (default: the demo family)")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--per-class", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--modes", default=None, help="comma list of reference,fast,cuda")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    from engines.kernels import using
    from engines.runtime import load_runtime

    from .environment import describe_environment
    from .profile_verify import available_modes
    from .workloads import CLASSES, load_class

    modes = args.modes.split(",") if args.modes else available_modes()
    runtime = load_runtime(args.model, dtype=args.dtype)
    engines = engines_for(runtime)
    prompts = [(k, runtime.encode_chat(list(p.messages))) for k in CLASSES for p in load_class(k)[: args.per_class]]
    # warm-up: every path and engine once (compile, JIT, kernel self-checks)
    for mode in modes:
        with using(enabled=mode != "reference", cuda_kernel=mode == "cuda"):
            for name, engine in engines.items():
                started = time.perf_counter()
                run_once(engine, prompts[0][1], 16)
                print(f"warm-up {mode} {name}: {time.perf_counter() - started:.2f} s", flush=True)
    runs: dict = defaultdict(list)          # (mode, engine, class) -> runs
    for klass, ids in prompts:
        for mode in modes:
            with using(enabled=mode != "reference", cuda_kernel=mode == "cuda"):
                for name, engine in engines.items():
                    run = run_once(engine, ids, args.tokens)
                    runs[(mode, name, klass)].append(run)
                    print(f"run {mode} {name} {klass}: {run['emitted']} tok in {run['seconds']:.3f} s, "
                          f"{run['steps']} steps, accepted {run['accepted']}/{run['drafted']}", flush=True)

    env = describe_environment()
    print(f"engines on {runtime.model_id} ({runtime.bundle.dtype}), {env['device']}, BLAS {env['sgemm']}, "
          f"{len(prompts)} prompts x {args.tokens} tokens, greedy")
    report: dict = {"env": env, "model": runtime.model_id, "dtype": str(runtime.bundle.dtype), "rows": []}
    print("| path | engine | class | tok/s | vs raw | acceptance | accepted/step | c (step/raw step) | = raw |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in modes:
        for name in engines:
            for klass in CLASSES + ("all",):
                pick = (lambda m, n: [r for k in CLASSES for r in runs[(m, n, k)]]) if klass == "all" else \
                    (lambda m, n, k=klass: runs[(m, n, k)])
                row = summarise(pick(mode, name), pick(mode, "raw"))
                raw_row = summarise(pick(mode, "raw"), pick(mode, "raw"))
                row.update(path=mode, engine=name, klass=klass, speedup=row["tok_s"] / raw_row["tok_s"])
                report["rows"].append(row)
                print(f"| {mode} | {name} | {klass} | {row['tok_s']:.1f} | {row['speedup']:.2f} | "
                      f"{row['acceptance']:.2f} | {row['accepted_per_step']:.2f} | {row['cost_ratio']:.2f} | "
                      f"{row['equal_to_raw']}/{row['runs']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    mx.clear_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
