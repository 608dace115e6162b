"""Host or device: how much of an engine step the host spends waiting for the device.

    python -m bench.profile_host [--model DIR] [--dtype D] [--tokens 128] [--per-class 1] [--passes 2]
                                 [--cycles auto|pipelined,host]

Pass 1 meets every tree layout, shape and kernel for the first time; pass 2 repeats the same
prompts, so a difference between them is one-off (per-layout / per-shape) setup.

Each engine decodes the same prompts with the host-sync calls timed (`array.item`, `array.tolist`,
`mx.eval`, `numpy.array`, wrapped here for the run): that is the time the host sat waiting for the
device (including launches inside eval). wait / step near 0 means the device idles while Python
builds graphs and launches work (host-bound: fewer, larger launches or compiled graphs would help);
near 1 means the device is the bottleneck (cheaper kernels would).

`--cycles pipelined,host` measures every speculative engine both ways in the same process: its
pipelined cycles (cycle n+1 queued before cycle n's verdict is read; rows `<engine>/pipelined`) and the
host cycle (each verdict read before the next draft; rows `<engine>/host`), one after the other per
engine. The default, `auto`, runs what a request gets (pipelined on a GPU, the host cycle on the CPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import contextmanager
from typing import Iterator


class SyncClock:
    """Seconds spent inside host-sync calls and inside async_eval (not counting nested calls)."""

    def __init__(self) -> None:
        self.seconds = 0.0          # blocking reads: waiting for the device
        self.async_seconds = 0.0    # async_eval: launching (GPU) or, on a backend that runs it inline, computing
        self._depth = 0

    def wrap(self, fn, is_async: bool = False):
        def timed(*args, **kwargs):
            self._depth += 1
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    elapsed = time.perf_counter() - started
                    if is_async:
                        self.async_seconds += elapsed
                    else:
                        self.seconds += elapsed
        return timed


@contextmanager
def timed_syncs(clock: SyncClock) -> Iterator[SyncClock]:
    import mlx.core as mx
    import numpy as np

    patched = [(mx.array, "item"), (mx.array, "tolist"), (mx, "eval"), (np, "array"), (mx, "async_eval")]
    originals = [getattr(owner, name) for owner, name in patched]
    for (owner, name), original in zip(patched, originals):
        setattr(owner, name, clock.wrap(original, is_async=name == "async_eval"))
    try:
        yield clock
    finally:
        for (owner, name), original in zip(patched, originals):
            setattr(owner, name, original)


def decode(engine, prompt_ids: list[int], tokens: int, clock: SyncClock) -> tuple[float, float, float, int]:
    """(seconds, seconds in syncs, seconds in async_eval, steps) after the first (prefill) step."""
    from contracts.engine import CancelToken
    from contracts.sampling import SamplingParams

    steps, emitted, started, waited, launched = 0, 0, None, 0.0, 0.0
    for step in engine.generate(prompt_ids, SamplingParams(temperature=0.0, max_tokens=tokens), CancelToken()):
        if started is None:
            started, waited, launched = time.perf_counter(), clock.seconds, clock.async_seconds
            continue
        steps += 1
        emitted += len(step.tokens)
        if emitted >= tokens:
            break
    return time.perf_counter() - started, clock.seconds - waited, clock.async_seconds - launched, steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--per-class", type=int, default=1)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--engines", default=None, help="comma list (default: all loaded)")
    parser.add_argument("--cycles", default="auto",
                        help="comma list of auto,pipelined,host: speculative cycle modes to measure (default: auto)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import mlx.core as mx

    from bench.setup import load_bench_model
    from bench.workloads import load_workload
    from engines.kernels import using

    model = load_bench_model(args.model, dtype=args.dtype)
    runtime = model.timed
    prompts = [runtime.encode_chat(list(p.messages)) for p in load_workload("mixed", args.per_class, 0)]
    rows = {}
    names = args.engines.split(",") if args.engines else list(runtime.engine_names)
    modes = args.cycles.split(",")
    for name in names:
        engine = runtime.engines[name]
        for mode in modes if name != "raw" else modes[:1]:
            label = name if mode == "auto" or name == "raw" else f"{name}/{mode}"
            with using(pipelined=None if mode == "auto" else mode == "pipelined"):
                rows.update(_profile(engine, label, prompts, args))
    print(f"device {mx.default_device()}; {len(prompts)} prompts x {args.tokens} tokens, greedy")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": str(mx.default_device()), "tokens": args.tokens, "engines": rows}, handle, indent=1)
    return 0


def _profile(engine, label: str, prompts: list[list[int]], args) -> dict[str, dict]:
    """Per pass: ms per engine step, split into waiting / in async_eval / Python, and tokens per step."""
    rows = {}
    clock = SyncClock()
    with timed_syncs(clock):
        decode(engine, prompts[0], 16, clock)  # warm-up: first allocations, the common shapes
        for run in range(1, args.passes + 1):
            wall = waited = launched = steps = 0.0
            for ids in prompts:
                seconds, wait_seconds, async_seconds, n = decode(engine, ids, args.tokens, clock)
                wall, waited, launched, steps = wall + seconds, waited + wait_seconds, launched + async_seconds, steps + n
            per = 1e3 / max(steps, 1)
            step, wait, launch = wall * per, waited * per, launched * per
            tokens = len(prompts) * args.tokens / max(wall, 1e-9)
            rows[f"{label}/pass{run}"] = {"step_ms": step, "wait_ms": wait, "async_eval_ms": launch,
                                          "python_ms": max(step - wait - launch, 0.0), "steps": int(steps),
                                          "tokens_per_s": tokens}
            print(f"{label:<14} pass {run}: step {step:6.2f} ms = waiting {wait:6.2f} + in async_eval {launch:6.2f} + "
                  f"Python {rows[f'{label}/pass{run}']['python_ms']:6.2f}; {tokens:6.1f} tok/s", flush=True)
    return rows




if __name__ == "__main__":
    from bench.environment import as_served

    as_served()
    sys.exit(main())
