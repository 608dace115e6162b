"""A long context beside short streams: batching in groups of like lengths against one padded batch, side by side.

    python -m bench.batch_groups [--model demo|random-0.8b|DIR] [--dtype D] [--long 6000] [--short 7]
                                 [--tokens 64] [--rounds 3] [--json FILE]

One request with a `--long`-token context (an agent's) and `--short` requests of 24-48 tokens (chats) decode
raw at the same time through `engines.raw.decode`, one step each per round as the worker interleaves them.
Two ways, alternating which goes first each round:
- groups: the server's rule (`engines.batch.padding_fits`): rows batch with rows of like lengths, so the long
  one decodes alone and the short ones share a forward;
- one batch: any row joins any other (as before the rule), so every short row is left-padded to the long
  one's length.
Prompts are random token ids (the timing does not read them) and prefilled before the clock starts; every
reply runs `--tokens` greedy tokens. Reported: tokens/s over the rounds where all streams decode, the long
stream's own tokens/s, the most memory the groups' caches held, MLX's peak memory over the decode (both in
MiB), and whether both ways produced the same tokens.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import mlx.core as mx

from bench.environment import as_served, describe_environment, print_table, record
from bench.profile_verify import add_served_model_arguments, served_model
from contracts.engine import CancelToken
from engines.batch import DecodeBatch
from engines.bundle import ModelBundle
from engines.prefill import prefill
from engines.raw import decode
from engines.sampling import Rng, SamplerConfig

GREEDY = SamplerConfig(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0)
ONE_BATCH = 10**15   # free padding that lets any row join any other


def prompts(vocab: int, long: int, short: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    lengths = [long] + [rng.randint(24, 48) for _ in range(short)]
    return [[rng.randrange(1000, vocab) for _ in range(n)] for n in lengths]


def _group_bytes(batch: DecodeBatch) -> int:
    return sum(c.nbytes for g in batch.groups for c in g.cache or ())


def run(bundle: ModelBundle, ids: list[list[int]], tokens: int, free_padding: int) -> dict:
    batch = DecodeBatch(bundle, max_rows=len(ids))
    batch.free_padding = free_padding
    caches = []
    for prompt in ids:
        cache = bundle.make_cache()
        prefill(bundle, cache, prompt[:-1])
        caches.append(cache)
    mx.eval([c.state for cache in caches for c in cache])
    streams = [decode(bundle, cache, prompt[-1], GREEDY, Rng(0), CancelToken(), batch=batch)
               for cache, prompt in zip(caches, ids)]
    del caches   # the streams hold their caches now
    out: list[list[int]] = [[] for _ in ids]
    times: list[list[float]] = [[] for _ in ids]
    held = 0
    mx.reset_peak_memory()
    base = mx.get_active_memory()
    while any(len(o) < tokens for o in out):
        for i, steps in enumerate(streams):
            if len(out[i]) < tokens:
                out[i] += next(steps).tokens
                times[i].append(time.perf_counter())
                if len(out[i]) >= tokens:
                    steps.close()
        held = max(held, _group_bytes(batch))
    # the rounds where every stream decodes: from the last first token to the first stream's end
    start, stop = max(t[0] for t in times), min(t[-1] for t in times)
    produced = sum(sum(1 for x in t if start < x <= stop) for t in times)
    long_times = times[0]
    return {"tokens_per_s": produced / (stop - start) if stop > start else float("nan"),
            "long_tokens_per_s": (len(long_times) - 1) / (long_times[-1] - long_times[0]),
            "group_cache_mib": held / 2**20, "peak_over_start_mib": (mx.get_peak_memory() - base) / 2**20,
            "tokens": [o[:tokens] for o in out]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_served_model_arguments(parser)
    parser.add_argument("--long", type=int, default=6000, help="tokens in the long context")
    parser.add_argument("--short", type=int, default=7, help="short streams beside it")
    parser.add_argument("--tokens", type=int, default=64, help="tokens each stream decodes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    bundle = served_model(args)
    ids = prompts(bundle.vocab_size, args.long, args.short)
    grouped_padding = DecodeBatch(bundle).free_padding
    ways = {"groups": grouped_padding, "one batch": ONE_BATCH}
    run(bundle, [p[:64] for p in ids], 8, grouped_padding)   # warm-up: first-use compiles
    measured: dict[str, list[dict]] = {way: [] for way in ways}
    for r in range(args.rounds):
        order = list(ways) if r % 2 == 0 else list(ways)[::-1]
        for way in order:
            measured[way].append(run(bundle, ids, args.tokens, ways[way]))
            print(f"round {r + 1}, {way}: {measured[way][-1]['tokens_per_s']:.1f} tokens/s", flush=True)
    same = all(a["tokens"] == b["tokens"] for a, b in zip(measured["groups"], measured["one batch"]))
    keys = ("tokens_per_s", "long_tokens_per_s", "group_cache_mib", "peak_over_start_mib")
    results = {way: {k: statistics.median(m[k] for m in runs) for k in keys} for way, runs in measured.items()}
    results.update(model=args.model, long=args.long, short=args.short, tokens=args.tokens, rounds=args.rounds,
                   free_padding_tokens=grouped_padding, kv_bytes_per_token=bundle.kv_bytes_per_token(),
                   same_tokens=same, environment=describe_environment())
    record(results, args.json)
    print(f"long {args.long} tokens + {args.short} short, {args.tokens} tokens each; free padding "
          f"{grouped_padding} tokens; same tokens both ways: {same}")
    columns = ["way", "tokens/s (all decoding)", "long stream tokens/s", "groups' caches MiB",
               "MLX peak over start MiB"]
    print_table(columns, [[way, *(f"{results[way][k]:.1f}" for k in keys)] for way in ways])
    g, o = results["groups"], results["one batch"]
    caches = g["group_cache_mib"] / max(o["group_cache_mib"], 1e-9)
    print(f"groups / one batch: tokens/s {g['tokens_per_s'] / o['tokens_per_s']:.2f}x, long stream "
          f"{g['long_tokens_per_s'] / o['long_tokens_per_s']:.2f}x, caches {caches:.2f}x")
    return 0


if __name__ == "__main__":
    as_served()
    raise SystemExit(main())
