"""How much of the target's own replies repeats itself, per class: why the drafters' acceptance does not
differ by class on a family (BENCHMARKS.md, "What any router could reach").

Raw decoding answers the same held-out prompts `bench.handoff_replay` records (prompts skip..skip+per_class
of each class), greedy and at the model's sampling defaults; each reply's repetition is the share of its
4-grams that already occurred earlier in it (a reply stuck in a loop is near 1). A drafter of the
target's own output predicts a loop as well in prose as in code, so a class whose replies loop is as
easy to speculate on as code is. Beside it, the target's mean top-1 probability at every position of its
own reply (one teacher-forced forward; greedy at temperature 1, sampled after the mode's temperature and
truncation): how far ahead the target is predictable at all, whatever the drafter; and what a chain drafter
that always proposed the target's likeliest 4 tokens would have accepted per cycle on that reply. With
`--traces` (handoff_replay's recording of the same prompts) the engines' mean accepted tokens per cycle per
class are printed beside it, and after it the share of cycles that accepted at least d drafts (where a tree
loses its tokens).

    python -m bench.reply_repetition [--model DIR] [--per-class 16] [--skip 8] [--max-tokens 128] [--traces FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

N = 4   # the n-gram a loop repeats


def repeated_share(tokens: Sequence[int], n: int = N) -> float:
    """The share of the reply's n-grams that occurred earlier in it (0 for replies shorter than n + 1)."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    if len(grams) < 2:
        return 0.0
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for gram in grams:
        repeats += gram in seen
        seen.add(gram)
    return repeats / len(grams)


def target_top1(bundle, prompt_ids: Sequence[int], reply: Sequence[int], params) -> tuple[float, list[bool]]:
    """At the positions that chose `reply`: the target's mean probability of its likeliest token, and whether
    each reply token was that token."""
    import mlx.core as mx

    from engines.sampling import SamplerConfig, probs, resolve

    if not reply:
        return 0.0, []
    logits = bundle.model(mx.array([list(prompt_ids) + list(reply)]), cache=bundle.make_cache())
    chosen = logits[0, len(prompt_ids) - 1: len(prompt_ids) - 1 + len(reply)].astype(mx.float32)
    cfg = resolve(params, bundle.generation)
    if cfg.greedy:   # the softmax itself: a greedy drafter must name its argmax
        cfg = SamplerConfig(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0)
    dist = probs(chosen, cfg)
    hits = (mx.argmax(dist, axis=-1) == mx.array(list(reply))).tolist()
    return float(mx.mean(mx.max(dist, axis=-1)).item()), [bool(hit) for hit in hits]


def oracle_chain(hits: Sequence[bool], depth: int = 4) -> list[int]:
    """Accepted drafts per cycle of a drafter that always proposes the target's likeliest `depth` tokens,
    replayed on the reply the target sampled: each cycle accepts the run of hits from where it starts (at
    most `depth`), and the next starts after the target's own token that ended it."""
    cycles, start = [], 0
    while start < len(hits):
        run = 0
        while run < depth and start + run < len(hits) and hits[start + run]:
            run += 1
        cycles.append(run)
        start += run + 1
    return cycles


def replies(per_class: int, skip: int, max_tokens: int, modes: Sequence[str], dtype: str | None,
            model: str | None = None) -> list[dict]:
    from contracts.engine import CancelToken
    from engines.runtime import load_runtime

    from .run import model_defaults, sampling_params
    from .workloads import CLASSES, load_class

    runtime = load_runtime(model, dtype=dtype)
    sampled = model_defaults(runtime.bundle.generation)
    rows = []
    for klass in CLASSES:
        for prompt in load_class(klass)[skip:skip + per_class]:
            ids = runtime.encode_chat(list(prompt.messages))
            for mode in modes:
                params = sampling_params(mode, max_tokens, prompt.id, 0, sampled)
                tokens = [t for chunk in runtime.generate(ids, params, "raw", CancelToken()) for t in chunk.token_ids]
                top1, hits = target_top1(runtime.bundle, ids, tokens, params)
                rows.append({"klass": klass, "mode": mode, "id": prompt.id, "tokens": len(tokens),
                             "repeated": repeated_share(tokens), "top1": top1, "oracle_chain": oracle_chain(hits)})
    return rows


def cycles_by_class(traces: list[dict]) -> dict[tuple[str, str, str], list[int]]:
    """Accepted drafts of every cycle, pooled over requests, per (class, mode, engine) of handoff_replay's
    traces (requests without cycles add none)."""
    cycles: dict[tuple[str, str, str], list[int]] = {}
    for trace in traces:
        cycles.setdefault((trace["klass"], trace["mode"], trace["engine"]), []).extend(trace["accepted"])
    return {key: values for key, values in cycles.items() if values}


def accepted_by_class(traces: list[dict]) -> dict[tuple[str, str, str], float]:
    """Mean accepted drafts per cycle of each (class, mode, engine) in handoff_replay's traces."""
    return {key: statistics.fmean(values) for key, values in cycles_by_class(traces).items()}


def depth_reach(traces: list[dict]) -> dict[tuple[str, str, str], list[float]]:
    """Per (class, mode, engine): the share of cycles that accepted at least d drafts, d = 1 .. the deepest
    seen (where a tree loses its tokens: at its first draft or deeper)."""
    return {key: [sum(a >= d for a in values) / len(values) for d in range(1, max(max(values), 1) + 1)]
            for key, values in cycles_by_class(traces).items()}


def depth_report(reach: dict[tuple[str, str, str], list[float]]) -> str:
    depth = max((len(shares) for shares in reach.values()), default=1)
    lines = ["| mode | engine | class | " + " | ".join(f"accepted >= {d}" for d in range(1, depth + 1))
             + " | " + " | ".join(f"{d} given {d - 1}" for d in range(2, depth + 1)) + " |",
             "|" + "---|" * (3 + 2 * depth - 1)]
    for (klass, mode, engine), shares in sorted(reach.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        shares = shares + [0.0] * (depth - len(shares))
        given = [shares[d] / shares[d - 1] if shares[d - 1] else 0.0 for d in range(1, depth)]
        lines.append(f"| {mode} | {engine} | {klass} | " + " | ".join(f"{x:.2f}" for x in shares + given) + " |")
    return "\n".join(lines)


def report(rows: list[dict], accepted: dict[tuple[str, str, str], float]) -> str:
    engines = sorted({engine for _, _, engine in accepted})
    head = ("| mode | class | replies | repeated 4-grams (mean) | replies over half repeats | target top-1 p (mean) "
            "| top-1 chain of 4 accepted / cycle |")
    head += "".join(f" {engine} accepted / cycle |" for engine in engines)
    lines = [head, "|" + "---|" * (7 + len(engines))]
    for mode in dict.fromkeys(row["mode"] for row in rows):
        for klass in dict.fromkeys(row["klass"] for row in rows):
            group = [row for row in rows if row["mode"] == mode and row["klass"] == klass]
            shares = [row["repeated"] for row in group]
            top1 = [row["top1"] for row in group if "top1" in row]
            cells = [f"{accepted[(klass, mode, engine)]:.2f}" if (klass, mode, engine) in accepted else "—"
                     for engine in engines]
            top1_cell = f"{statistics.fmean(top1):.3f}" if top1 else "—"
            chain = [a for row in group for a in row.get("oracle_chain", ())]
            chain_cell = f"{statistics.fmean(chain):.2f}" if chain else "—"
            lines.append(f"| {mode} | {klass} | {len(shares)} | {statistics.fmean(shares):.2f} | "
                         f"{sum(share > 0.5 for share in shares)} | {top1_cell} | {chain_cell} |"
                         + "".join(f" {cell} |" for cell in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-class", type=int, default=16)
    parser.add_argument("--skip", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--modes", default="greedy,sampled")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--model", help="target dir (default: the demo family)")
    parser.add_argument("--traces", type=Path, help="handoff_replay's traces of the same prompts")
    parser.add_argument("--json", type=Path, help="also write every reply's row here")
    args = parser.parse_args(argv)
    rows = replies(args.per_class, args.skip, args.max_tokens, args.modes.split(","), args.dtype, args.model)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    traces = json.loads(args.traces.read_text()) if args.traces else []
    print(report(rows, accepted_by_class(traces)))
    if traces:
        print()
        print(depth_report(depth_reach(traces)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
