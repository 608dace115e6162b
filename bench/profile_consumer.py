"""What the gateway's per-step work costs an engine: the same requests decoded by the engine alone and
through the gateway's worker path, interleaved per prompt.

    python -m bench.profile_consumer [--model DIR] [--dtype D] [--engines raw,mtp,ddtree]
                                     [--per-class 2] [--tokens 128] [--rounds 2]

Paths, per engine and decoding mode:
- `engine`: Runtime.generate (detokenising, stops) — what `switchyard bench`'s fixed lanes time;
- `gateway`: gateway.worker.pipeline.run_request with the engine forced (chat template, reply
  parser, the router's per-step bookkeeping: what a served request runs, less HTTP);
- `gateway-nomonitor`: the same with the router's per-step `observe` skipped (the monitor's share).

Per path: decode tokens per second (median over requests), mean engine step seconds, and the
consumer's thread CPU time per step (the work done on each step's tokens between two steps of the
engine, on the worker thread). On a GPU the host builds the next step while the device runs the
previous one, so consumer time adds to the step wherever the host is the bottleneck; on the CPU it
mostly overlaps the step's compute.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

from .environment import mapped_blas

PATHS = ("engine", "gateway", "gateway-nomonitor")


class ConsumerClock:
    """Thread CPU time the caller spends on each item an engine's generator yields."""

    def __init__(self) -> None:
        self.per_step: list[float] = []

    def wrap(self, items: Iterator) -> Iterator:
        for item in items:
            started = time.thread_time_ns()
            yield item
            self.per_step.append((time.thread_time_ns() - started) / 1e3)


def instrument(runtime, clock: ConsumerClock) -> None:
    """Route every engine's generate through the clock (each engine object once)."""
    for engine in {id(e): e for e in runtime.engines.values()}.values():
        if getattr(engine, "_consumer_clock", None) is None:
            inner = engine.generate
            engine.generate = lambda *args, _inner=inner, **kwargs: clock.wrap(_inner(*args, **kwargs))
            engine._consumer_clock = clock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--dtype")
    parser.add_argument("--engines", default="raw,mtp,ddtree")
    parser.add_argument("--modes", default="greedy,sampled")
    parser.add_argument("--per-class", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    import mlx.core as mx

    from .http_client import request_body
    from .measure import RequestRecord, time_pipeline, time_runtime
    from .run import sampling_params
    from .setup import fresh_router, load_bench_model, load_classifier
    from .workloads import load_workload

    model = load_bench_model(args.model, dtype=args.dtype)
    runtime = model.runtime
    classifier, _ = load_classifier({})
    router = fresh_router(runtime.engine_names, classifier)
    observe = router.observe
    clock = ConsumerClock()
    instrument(runtime, clock)
    prompts = load_workload("mixed", args.per_class)
    tokenizer = runtime.bundle.tokenizer
    print(f"{mx.default_device()}, BLAS {mapped_blas()}, {len(prompts)} prompts x {args.rounds} rounds, "
          f"{args.tokens} tokens")

    def run(path: str, engine: str, messages: list[dict], ids: list[int], params) -> tuple[RequestRecord, list[float]]:
        record = RequestRecord("p", "", engine, path, 0)
        clock.per_step.clear()
        if path == "engine":
            time_runtime(runtime, ids, params, engine, record)
        else:
            router.observe = observe if path == "gateway" else (lambda *_: None)
            time_pipeline(runtime, router, request_body(messages, params, engine), record)
        return record, clock.per_step[1:-1]   # the first step holds the prefill; after the last, the next request

    print("| engine | mode | path | requests | decode tok/s (median) | vs engine | step ms (mean) | consumer µs/step (median) |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    rows = []
    for engine in args.engines.split(","):
        for mode in args.modes.split(","):
            results: dict[str, dict[str, list[float]]] = {p: {"tps": [], "step": [], "consumer": []} for p in PATHS}
            for repeat in range(args.rounds + 1):   # round 0 warms every path up, unrecorded
                for i, prompt in enumerate(prompts):
                    messages = list(prompt.messages)
                    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
                    params = sampling_params(mode, args.tokens, prompt.id, repeat)
                    order = PATHS if (i + repeat) % 2 == 0 else PATHS[::-1]
                    for path in order:
                        record, consumer = run(path, engine, messages, ids, params)
                        if repeat and record.decode_tokens > 8:
                            results[path]["tps"].append(record.decode_tps)
                            results[path]["step"].append(record.step_s * 1e3)
                            results[path]["consumer"].extend(consumer)
            base = statistics.median(results["engine"]["tps"])
            for path in PATHS:
                r = results[path]
                row = {"engine": engine, "mode": mode, "path": path, "requests": len(r["tps"]),
                       "decode_tps": statistics.median(r["tps"]), "vs_engine": statistics.median(r["tps"]) / base,
                       "step_ms": statistics.mean(r["step"]), "consumer_us": statistics.median(r["consumer"])}
                rows.append(row)
                print(f"| {engine} | {mode} | {path} | {row['requests']} | {row['decode_tps']:.1f} | "
                      f"{row['vs_engine']:.3f} | {row['step_ms']:.2f} | {row['consumer_us']:.0f} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    from bench.environment import as_served

    as_served()
    raise SystemExit(main())
