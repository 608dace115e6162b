"""Where an MTP-K1 cycle's time goes, next to a raw step at the same context (greedy, fenced pieces):
verify forward (2-token chain), lm_head + verify rule + the one host read, commit, head draft.

    python -m bench.profile_mtp_cycle [--model DIR] [--dtype float32] [--cycles 40]

The engine runs the same pieces as one graph with one host sync; the fences here serialise them,
so the pieces say what a cycle costs relative to a raw step, not how they overlap.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import mlx.core as mx


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="target dir (default: the demo family)")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--reference", action="store_true", help="run the verify on the reference path")
    args = parser.parse_args(argv)

    from mlx_lm.models.cache import KVCache

    from engines.kernels import fast_paths
    from engines.prefill import prefill
    from engines.runtime import load_runtime
    from engines.sampling import Rng, SamplerConfig, choose
    from engines.speculative import verify_one
    from engines.target import commit, forward_tree
    from engines.tree import TreeLayout

    from .profile_verify import _restore, _snapshot

    fast_paths.enabled = not args.reference
    runtime = load_runtime(args.model, dtype=args.dtype)
    bundle, engine = runtime.bundle, runtime.engines["mtp"]
    greedy, rng = SamplerConfig(0.0, 1.0, 0, 0.0), Rng(0)
    ids = runtime.encode_chat([{"role": "user", "content": "Write a Python function that sorts a list of records by date."}])
    cache, head_cache = bundle.make_cache(), KVCache()
    prefilled = prefill(bundle, cache, ids, last_alone=True)
    pending = choose(bundle.lm_head(prefilled.hidden[-1:]), greedy, rng)
    prompt = mx.array(ids, dtype=mx.uint32)
    draft_logits = engine.bundle.lm_head(engine.head_rows(mx.concatenate([prompt[1:], pending.astype(mx.uint32)]), prefilled.hidden, head_cache)[-1])
    token = int(pending.item())
    times: dict[str, list[float]] = {k: [] for k in ("verify forward", "lm_head + rule + host read", "commit", "head draft", "raw step")}
    chain = TreeLayout.chain(2)
    for _ in range(args.cycles):
        t0 = time.perf_counter()
        draft = mx.argmax(draft_logits)
        out = forward_tree(bundle, mx.stack([mx.array(token, dtype=mx.uint32), draft.astype(mx.uint32)]), chain, cache)
        mx.eval(out.hidden, [s.state for s in out.snapshots.values()], [c.state for c in cache])
        t1 = time.perf_counter()
        verdict = verify_one(draft, None, bundle.lm_head(out.hidden), greedy, rng)
        accepted, drafted, bonus = (int(v) for v in mx.stack(
            [verdict.accepted.astype(mx.int64), draft.astype(mx.int64), verdict.bonus.astype(mx.int64)]).tolist())
        t2 = time.perf_counter()
        path = [0, 1] if accepted else [0]
        commit(bundle, cache, out, path)
        mx.eval([c.state for c in cache])
        t3 = time.perf_counter()
        emitted = [drafted, bonus] if accepted else [bonus]
        draft_logits = engine.bundle.lm_head(engine.head_rows(mx.array(emitted, dtype=mx.uint32), out.hidden[: len(path)], head_cache)[-1])
        mx.eval(draft_logits)
        t4 = time.perf_counter()
        token = bonus
        saved = _snapshot(cache)  # a raw step at the same context, then undone
        t5 = time.perf_counter()
        choose(bundle.model(mx.array([[token]], dtype=mx.uint32), cache=cache)[:, -1, :], greedy, rng).item()
        mx.eval([c.state for c in cache])
        t6 = time.perf_counter()
        _restore(cache, saved)
        for name, seconds in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t6 - t5)):
            times[name].append(seconds)
    raw = statistics.median(times["raw step"])
    path = "reference" if args.reference else "fast"
    print(f"MTP cycle pieces, {runtime.model_id} ({bundle.dtype}), {mx.default_device()}, {path} path, {args.cycles} cycles")
    print("| piece | median ms | min ms | / raw step (median) |")
    print("|---|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values) * 1000:.2f} | {min(values) * 1000:.2f} | {statistics.median(values) / raw:.2f} |")
    return 0


if __name__ == "__main__":
    from bench.environment import as_served

    as_served()
    sys.exit(main())
