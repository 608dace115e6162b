"""Replay the mid-request hand-off rule on recorded acceptance traces: what would each variant of the
rule have won or lost against running every request to the end on its engine?

Greedy decoding is lossless, so a request handed to raw after verify h produces the same tokens; its
time is (h + 1) verifies at the engine's cost ratio c plus one raw step per remaining token. That makes
the rule's counterfactual exact given c, and the same traces can be replayed at any machine's c.
Sampled traces are replayed the same way (the rest of a sampled request on raw has the same length in
distribution, at one step a token).

    # record traces on prompts neither measured nor used to warm routers by `switchyard bench`
    PYTHONPATH=. python -m bench.handoff_replay --record bench/results/handoff-traces.json
    # replay them at a machine's cost ratios
    PYTHONPATH=. python -m bench.handoff_replay --traces bench/results/handoff-traces.json \\
        --cost mtp=1.95 --cost ddtree=2.3
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from contracts.engine import SwitchRule
from contracts.names import CLASSES
from engines.switching import SwitchWatch
from gateway.routing.monitor import WindowPairs

# the rule's defaults (gateway.routing.policy.FallbackPolicy); repeated here to keep MLX-free replays
# independent of a policy file, and checked against it in the tests
WINDOW, MARGIN, EVIDENCE_Z, PRIOR = 8, 0.1, 1.645, 0.5


@dataclass(frozen=True)
class Trace:
    klass: str
    engine: str
    mode: str
    accepted: tuple[int, ...]   # accepted draft tokens per verify, in order

    @property
    def tokens(self) -> int:
        return sum(1 + a for a in self.accepted)


class _LastWindowWatch(SwitchWatch):
    """The rule before dips were counted by their length: the last window alone, at one carry."""

    def _dip_windows(self, engine: str) -> float:
        return 1.0


def window_persistence(traces: Sequence[Trace], window: int = WINDOW) -> float:
    """The monitor's estimator (WindowPairs, here a plain mean over all pairs): the slope of a request's
    next window mean on its previous one, pooled; 1.0 while the windows have not varied."""
    pairs = WindowPairs()
    for trace in traces:
        means = [statistics.fmean(trace.accepted[i:i + window])
                 for i in range(0, len(trace.accepted) - window + 1, window)]
        for previous, following in zip(means, means[1:]):
            pairs.update(previous, following, 0.0)   # weight 0: every pair counts alike
    slope = pairs.slope()
    return 1.0 if slope is None else slope


def hand_off_at(trace: Trace, rule: SwitchRule, watch_type: type[SwitchWatch] = SwitchWatch) -> int | None:
    watch = watch_type(rule, trace.engine)
    for index, accepted in enumerate(trace.accepted):
        watch.record(accepted)
        if watch.choice(("raw",)) == "raw":
            return index
    return None


def seconds(trace: Trace, cost: float, at: int | None) -> float:
    """Time in raw steps: the engine's verifies up to the hand-off, then a raw step per token left."""
    if at is None:
        return len(trace.accepted) * cost
    done = sum(1 + a for a in trace.accepted[:at + 1])
    return (at + 1) * cost + (trace.tokens - done)


Variant = tuple[str, Callable[[float], float], type[SwitchWatch]]   # name, share from measured p, watch

VARIANTS: tuple[Variant, ...] = (
    ("face value (share 1)", lambda p: 1.0, SwitchWatch),
    ("measured share, last window", lambda p: p, _LastWindowWatch),
    ("measured share, growing with the dip", lambda p: p, SwitchWatch),
    (f"prior {PRIOR}, last window", lambda p: PRIOR, _LastWindowWatch),
    (f"prior {PRIOR}, growing with the dip", lambda p: PRIOR, SwitchWatch),
)


def replay(traces: Sequence[Trace], costs: dict[str, float]) -> list[dict]:
    rows = []
    for engine in sorted({t.engine for t in traces}):
        for mode in sorted({t.mode for t in traces}):
            group = [t for t in traces if t.engine == engine and t.mode == mode]
            if not group or engine not in costs:
                continue
            cost, share = costs[engine], window_persistence(group)
            tokens = sum(t.tokens for t in group)
            never = sum(seconds(t, cost, None) for t in group)
            oracle = sum(min(seconds(t, cost, None), t.tokens) for t in group)
            row = {"engine": engine, "mode": mode, "requests": len(group), "cost": cost,
                   "measured_share": round(share, 3), "never_tok_per_step": tokens / never,
                   "oracle_vs_never": never / oracle, "variants": {}}
            for name, share_of, watch_type in VARIANTS:
                spent, handed = 0.0, 0
                for klass in CLASSES:
                    members = [t for t in group if t.klass == klass]
                    if not members:
                        continue
                    values = [a for t in members for a in t.accepted]
                    rule = SwitchRule(window=WINDOW, margin=MARGIN, evidence_z=EVIDENCE_Z, costs={engine: cost},
                                      step_sd={engine: statistics.pstdev(values)}, targets=("raw",),
                                      expected={engine: statistics.fmean(values)},
                                      persistence={engine: share_of(share)})
                    for trace in members:
                        at = hand_off_at(trace, rule, watch_type)
                        handed += at is not None
                        spent += seconds(trace, cost, at)
                row["variants"][name] = {"vs_never": never / spent, "hand_offs": handed}
            rows.append(row)
    return rows


def routing_bounds(traces: Sequence[Trace], costs: dict[str, float]) -> list[dict]:
    """What any router could reach on these requests, per decoding mode, in tokens per raw step: every
    fixed engine (raw included, at one step a token), the best engine per class (a perfect class
    router) and per request (an oracle that knows each request's acceptance before it starts), both
    against the best fixed engine. A request's engines are paired by their order in the recording;
    sampled traces of one prompt differ in tokens, so each engine's time is its seconds per token
    times the mean length of the prompt's traces (greedy: the same length)."""
    rows = []
    for mode in sorted({t.mode for t in traces}):
        engines = sorted({t.engine for t in traces if t.mode == mode and t.engine in costs})
        totals = {name: 0.0 for name in ("raw", *engines)}
        per_class_best = oracle = tokens = 0.0
        classes = {}
        for klass in CLASSES:
            groups = [[t for t in traces if t.mode == mode and t.klass == klass and t.engine == e] for e in engines]
            if not groups or not all(groups):
                continue
            class_time = {name: 0.0 for name in totals}
            class_tokens = class_oracle = 0.0
            for runs in zip(*groups):
                length = statistics.fmean(t.tokens for t in runs)
                times = {"raw": length} | {t.engine: length * seconds(t, costs[t.engine], None) / t.tokens
                                           for t in runs}
                for name, value in times.items():
                    class_time[name] += value
                class_oracle += min(times.values())
                class_tokens += length
            for name, value in class_time.items():
                totals[name] += value
            per_class_best += min(class_time.values())
            oracle += class_oracle
            tokens += class_tokens
            classes[klass] = {name: class_tokens / value for name, value in class_time.items()} | {
                "oracle": class_tokens / class_oracle}
        if not tokens:
            continue
        best = min(totals, key=totals.get)
        rows.append({"mode": mode, "fixed": {name: tokens / value for name, value in totals.items()},
                     "best_fixed": best, "per_class_vs_best": totals[best] / per_class_best,
                     "per_request_vs_best": totals[best] / oracle, "classes": classes})
    return rows


def record(per_class: int, skip: int, max_tokens: int, engines: Sequence[str], modes: Sequence[str],
           dtype: str | None, out: Path) -> list[Trace]:
    """Run every engine to the end (no rule) on prompts skip..skip+per_class of each class of the bench
    workload: `switchyard bench --per-class 8` measures the first 8 and warms routers with the last 8.
    `out` is rewritten after every prompt, so a run cut short keeps what it recorded."""
    from contracts.engine import CancelToken
    from engines.runtime import load_runtime

    from .run import model_defaults, sampling_params
    from .workloads import load_class

    runtime = load_runtime(dtype=dtype)
    sampled = model_defaults(runtime.bundle.generation)   # what a client that sets nothing gets
    traces = []
    by_class = [load_class(klass)[skip:skip + per_class] for klass in CLASSES]
    for prompt in (p for round_ in zip(*by_class) for p in round_):   # classes alternate: a cut run has all
        ids = runtime.encode_chat(list(prompt.messages))
        for mode in modes:
            params = sampling_params(mode, max_tokens, prompt.id, 0, sampled)
            for engine in engines:
                accepted = [chunk.step.accepted for chunk in runtime.generate(ids, params, engine, CancelToken())
                            if chunk.step is not None and chunk.step.drafted > 0]
                traces.append(Trace(prompt.klass, engine, mode, tuple(accepted)))
        out.write_text(json.dumps([t.__dict__ for t in traces]))
    return traces


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", metavar="FILE", help="run the engines and save their traces here")
    parser.add_argument("--traces", metavar="FILE", help="replay saved traces")
    parser.add_argument("--per-class", type=int, default=16)
    parser.add_argument("--skip", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--engines", default="mtp,ddtree")
    parser.add_argument("--modes", default="greedy,sampled")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--cost", action="append", default=[], metavar="ENGINE=C",
                        help="cost ratio of a verify in raw steps (default mtp=1.45, ddtree=2.25: this CPU)")
    args = parser.parse_args(argv)
    if args.record:
        traces = record(args.per_class, args.skip, args.max_tokens, args.engines.split(","),
                        args.modes.split(","), args.dtype, Path(args.record))
    elif args.traces:
        traces = [Trace(t["klass"], t["engine"], t["mode"], tuple(t["accepted"]))
                  for t in json.loads(Path(args.traces).read_text())]
    else:
        parser.error("--record FILE or --traces FILE")
    costs = {"mtp": 1.45, "ddtree": 2.25} | {k: float(v) for k, v in (c.split("=", 1) for c in args.cost)}
    print("What a router could reach, tokens per raw step (engine speeds from the traces at these costs):")
    for row in routing_bounds(traces, costs):
        fixed = ", ".join(f"{name} {value:.3f}" for name, value in row["fixed"].items())
        print(f"  {row['mode']}: {fixed}; best per class {row['per_class_vs_best']:.3f}x and per request "
              f"{row['per_request_vs_best']:.3f}x the best fixed engine ({row['best_fixed']})")
        for klass, speeds in row["classes"].items():
            print(f"    {klass:10s} " + ", ".join(f"{name} {value:.3f}" for name, value in speeds.items()))
    for row in replay(traces, costs):
        print(f"\n{row['engine']} {row['mode']}: {row['requests']} requests, c {row['cost']}, measured share "
              f"{row['measured_share']}, {row['never_tok_per_step']:.3f} tokens a raw step never handing off; "
              f"per-request oracle {row['oracle_vs_never']:.3f}x")
        for name, result in row["variants"].items():
            print(f"  {name:40s} {result['vs_never']:.3f}x never, {result['hand_offs']} hand-offs")


if __name__ == "__main__":
    main()
