"""Prefill with the GatedDeltaNet recurrence in chunks (engines/gdn_prefill.py) against mlx-lm's per-token loop.

    python -m bench.prefill_gdn [--model demo|random-0.8b|DIR] [--dtype D] [--tokens 512,2048] [--rounds 3] [--json FILE]

Each round prefills the same prompt (a fresh cache, the one prefill every engine runs) once with each, in
alternating order, and checks that the last row's hidden states agree. Prints seconds and tokens/s (medians)
and the ratio. On Metal mlx-lm's kernel runs instead of either, so this measures the CPU and CUDA.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import mlx.core as mx
import mlx_lm.models.gated_delta as mlx_gdn

import engines.gdn_prefill as gdn_prefill
from bench.environment import as_served, describe_environment, print_table, record
from bench.profile_verify import add_served_model_arguments, served_model
from engines.bundle import ModelBundle
from engines.prefill import prefill

WAYS = {"loop": gdn_prefill._LOOP, "chunked": gdn_prefill.gated_delta_chunked}


def _timed(bundle: ModelBundle, ids: list[int], way: str) -> tuple[float, mx.array]:
    mlx_gdn.gated_delta_ops = WAYS[way]
    try:
        start = time.perf_counter()
        out = prefill(bundle, bundle.make_cache(), ids)
        mx.eval(out.hidden)
        return time.perf_counter() - start, out.hidden[-1].astype(mx.float32)
    finally:
        gdn_prefill.install()


def measure(bundle: ModelBundle, tokens: int, rounds: int) -> dict:
    vocab = min(bundle.vocab_size, 30000)
    ids = [(i * 7919) % (vocab - 10) + 10 for i in range(tokens)]
    _timed(bundle, ids[:128], "loop")
    _timed(bundle, ids[:128], "chunked")
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    gap = 0.0
    for r in range(rounds):
        last = {}
        for way in (WAYS if r % 2 == 0 else list(WAYS)[::-1]):
            elapsed, last[way] = _timed(bundle, ids, way)
            seconds[way].append(elapsed)
        gap = max(gap, float(mx.abs(last["loop"] - last["chunked"]).max()))
    loop, chunked = statistics.median(seconds["loop"]), statistics.median(seconds["chunked"])
    return {"tokens": tokens, "loop_s": loop, "chunked_s": chunked, "loop_tokens_per_s": tokens / loop,
            "chunked_tokens_per_s": tokens / chunked, "speedup": loop / chunked, "max_abs_difference_last_row": gap}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_served_model_arguments(parser)
    parser.add_argument("--tokens", default="512,2048")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    bundle = served_model(args)
    rows = [measure(bundle, int(n), args.rounds) for n in args.tokens.split(",")]
    results = {"model": args.model, "rows": rows, "environment": describe_environment()}
    record(results, args.json)
    print_table(["prompt", "per-token loop", "chunked", "speedup", "max |diff| of the last row"],
                [[f"{row['tokens']} tokens", f"{row['loop_s']:.3f} s ({row['loop_tokens_per_s']:.0f} tok/s)",
                  f"{row['chunked_s']:.3f} s ({row['chunked_tokens_per_s']:.0f} tok/s)", f"{row['speedup']:.2f}x",
                  f"{row['max_abs_difference_last_row']:.1e}"] for row in rows])
    return 0


if __name__ == "__main__":
    as_served()
    raise SystemExit(main())
