"""What a batched raw step costs on this machine, and what batching gives without HTTP in the way.

    python -m bench.profile_batch [--model DIR] [--dtype float32] [--rows 1,2,4,8,16] [--json FILE]

1. c(B): seconds per batched decode step for B rows (pipelined, as engines/batch.py runs it), over a
   single row's pipelined step: the table the router's prior `batching.prior_row_cost` stands in for
   until the monitor has measured it (docs/operations.md, sizing --max-batch).
2. Engine-level throughput of N requests of the mixed workload (greedy, `--tokens` each): one after
   another on raw, versus all at once through the Runtime with batching (the worker's round robin),
   twice each (the first pass pays first-use compiles of new shapes on a GPU).
"""

from __future__ import annotations

import argparse
import json
import time

import mlx.core as mx

from contracts.engine import CancelToken, Pause
from contracts.sampling import SamplingParams
from engines.batch import DecodeBatch, RawStream
from engines.prefill import prefill
from engines.runtime import load_runtime
from engines.sampling import Rng, SamplerConfig

from .clients import mixed_prompts

GREEDY = SamplerConfig(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0)


def step_cost(runtime, rows: int, steps: int = 48) -> float:
    """Seconds per batched step of `rows` rows (a 64-token context each)."""
    bundle = runtime.bundle
    ids = runtime.encode_prompt("The history of the river valley and its towns, told in order. " * 6)[:64]
    batch = DecodeBatch(bundle, max_rows=max(rows, 2))
    members = []
    for _ in range(rows):
        cache = bundle.make_cache()
        prefill(bundle, cache, ids[:-1])
        members.append(batch.join(RawStream(cache), ids[-1], GREEDY, Rng(0)))
    for _ in range(8):   # warm: first-use compiles, the pipeline filled
        for row in members:
            batch.take(row)
    started = time.perf_counter()
    for _ in range(steps):
        for row in members:
            batch.take(row)
    seconds = (time.perf_counter() - started) / steps
    for row in members:
        batch.leave(row)
    return seconds


def throughput(runtime, prompts: list[list[int]], tokens: int, batched: bool) -> float:
    """Completion tokens per second for all prompts, serially on raw or interleaved with batching."""
    runtime.set_batching(len(prompts) if batched else 1)
    params = SamplingParams(max_tokens=tokens, temperature=0.0)
    started = time.perf_counter()
    produced = 0
    if batched:
        live = [runtime.generate(p, params, "raw", CancelToken()) for p in prompts]
        while live:
            for chunks in list(live):
                chunk = next(chunks)
                if isinstance(chunk, Pause):
                    continue
                produced += len(chunk.token_ids)
                if chunk.finish_reason is not None:
                    chunks.close()
                    live.remove(chunks)
    else:
        for p in prompts:
            for chunk in runtime.generate(p, params, "raw", CancelToken()):
                produced += len(chunk.token_ids)
                if chunk.finish_reason is not None:
                    break
    return produced / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile_batch", description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--rows", default="1,2,4,8,16")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    runtime = load_runtime(args.model, dtype=args.dtype)
    single = step_cost(runtime, 1)
    costs = {}
    for rows in (int(r) for r in args.rows.split(",")):
        seconds = step_cost(runtime, rows)
        costs[rows] = {"ms_per_step": seconds * 1e3, "c": seconds / single, "tok_s": rows / seconds}
        print(f"B={rows:3d}: {seconds * 1e3:7.2f} ms/step  c(B)={seconds / single:5.2f}  {rows / seconds:8.0f} tok/s",
              flush=True)
    items = mixed_prompts()[: args.clients]
    prompts = [runtime.chat_prompt(item["messages"]).ids for item in items]
    passes = []
    for attempt in range(2):
        serial = throughput(runtime, prompts, args.tokens, batched=False)
        batched = throughput(runtime, prompts, args.tokens, batched=True)
        passes.append({"serial_tok_s": serial, "batched_tok_s": batched, "ratio": batched / serial})
        print(f"pass {attempt + 1}: {args.clients} requests serial {serial:.0f} tok/s, batched {batched:.0f} tok/s "
              f"({batched / serial:.2f}x)", flush=True)
    report = {"device": str(mx.default_device()), "model": str(runtime.bundle.path), "step_cost": costs,
              "engine_level": passes, "tokens": args.tokens, "clients": args.clients}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    from bench.environment import as_served

    as_served()
    raise SystemExit(main())
