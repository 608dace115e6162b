"""Turn per-request records into the per-class / overall summary, the oracle regret and the goals.

Speedups and cost ratios are computed PER PROMPT against raw on the same prompt, mode and repeat,
then the median is taken (pairing cancels prompt-length and content effects). Aggregate rates
are total decode tokens / total decode seconds.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Iterable, Sequence

import numpy as np

from .measure import RequestRecord
from .warmup import stability
from .workloads import CLASSES, LONG_SUFFIX

ROUTABLE = ("raw", "mtp", "ddtree")   # what the router can pick: the per-request oracle's choices
GOALS = {
    "auto_vs_best_fixed_mixed": 1.10,
    "auto_vs_raw_every_class": 0.98,
    "auto_vs_raw_overall_greedy": 1.5,
    "regret_max": 0.05,
    "gateway_vs_stream_generate": 0.98,
}


def spread(values: Iterable[float]) -> dict:
    v = np.array([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"n": 0, "median": None, "min": None, "max": None, "q1": None, "q3": None}
    return {"n": int(v.size), "median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()),
            "q1": float(np.percentile(v, 25)), "q3": float(np.percentile(v, 75))}


def _key(r: RequestRecord) -> tuple[str, str, int]:
    return (r.prompt_id, r.mode, r.repeat)


def _ok(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.error is None and r.completion_tokens > 0]


def _rate(records: Sequence[RequestRecord]) -> float | None:
    tokens = sum(r.decode_tokens for r in records if math.isfinite(r.decode_s))
    seconds = sum(r.decode_s for r in records if math.isfinite(r.decode_s))
    return tokens / seconds if seconds > 0 else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def engine_stats(group: list[RequestRecord], raw_by_key: dict) -> dict:
    pairs = [(r, raw_by_key.get(_key(r))) for r in group]
    speedups = [r.decode_tps / raw.decode_tps for r, raw in pairs if raw is not None and raw.decode_tps > 0]
    e2e_speedups = [r.e2e_tps / raw.e2e_tps for r, raw in pairs if raw is not None and raw.e2e_tps > 0]
    costs = [r.step_s / raw.step_s for r, raw in pairs if raw is not None and raw.step_s > 0 and math.isfinite(r.step_s)]
    steps, drafted, accepted = (sum(getattr(r, f) for r in group) for f in ("steps", "drafted", "accepted"))
    return {
        "requests": len(group),
        "decode_tps": spread(r.decode_tps for r in group),
        "e2e_tps": spread(r.e2e_tps for r in group),
        "decode_tps_aggregate": _rate(group),
        "ttft_s": spread(r.ttft_s for r in group),
        "speedup_vs_raw": spread(speedups),
        "e2e_speedup_vs_raw": spread(e2e_speedups),
        "cost_ratio": spread(costs),
        "accepted_per_step": accepted / steps if steps and drafted else None,
        "acceptance": accepted / drafted if drafted else None,
        "completion_tokens": spread(r.completion_tokens for r in group),
        "peak_memory_bytes": max((r.peak_memory for r in group), default=0),
    }


def oracle_regret(records: list[RequestRecord], lane: str = "auto") -> dict:
    """Per request: the best routable fixed engine in hindsight vs what the auto lane achieved.
    regret = 1 - (auto's total decode rate) / (oracle's), both over auto's decoded tokens."""
    best: dict[tuple, tuple[str, float]] = {}
    for r in records:
        if r.engine in ROUTABLE and math.isfinite(r.decode_tps):
            if _key(r) not in best or r.decode_tps > best[_key(r)][1]:
                best[_key(r)] = (r.engine, r.decode_tps)
    auto_time = oracle_time = 0.0
    per_request, picks = [], Counter()
    for r in records:
        if r.engine != lane or _key(r) not in best or not math.isfinite(r.decode_tps):
            continue
        engine, rate = best[_key(r)]
        picks[(r.route_engine == engine)] += 1
        auto_time += r.decode_s
        oracle_time += r.decode_tokens / rate
        per_request.append(1.0 - r.decode_tps / rate)
    return {
        "regret": 1.0 - oracle_time / auto_time if auto_time > 0 else None,
        "per_request": spread(per_request),
        "auto_picked_oracle_engine": picks[True],
        "auto_requests": picks[True] + picks[False],
        "oracle_engines": dict(Counter(e for e, _ in best.values())),
    }


def class_oracle_regret(records: list[RequestRecord]) -> dict:
    """Against the best routable engine PER CLASS in aggregate (what a perfect static policy gets).
    Less biased than the per-request oracle, whose max over noisy measurements is optimistic."""
    auto_time = oracle_time = 0.0
    best: dict[str, str] = {}
    for klass in sorted({r.klass for r in records}):
        rates = {e: _rate([r for r in records if r.klass == klass and r.engine == e]) for e in ROUTABLE}
        rates = {e: v for e, v in rates.items() if v}
        autos = [r for r in records if r.klass == klass and r.engine == "auto" and math.isfinite(r.decode_s)]
        if not rates or not autos:
            continue
        best[klass] = max(rates, key=rates.get)
        auto_time += sum(r.decode_s for r in autos)
        oracle_time += sum(r.decode_tokens for r in autos) / rates[best[klass]]
    return {"regret": 1.0 - oracle_time / auto_time if auto_time > 0 else None, "best_engine_per_class": best}


def route_summary(records: list[RequestRecord], lane: str = "auto") -> dict:
    autos = [r for r in records if r.engine == lane]
    by_class: dict[str, Counter] = defaultdict(Counter)
    reasons: dict[str, Counter] = defaultdict(Counter)
    long = any(r.prompt_id.endswith(LONG_SUFFIX) for r in autos)
    for r in autos:
        for scope in (r.klass,) + ((CONTEXT_SCOPES[r.prompt_id.endswith(LONG_SUFFIX)],) if long else ()):
            by_class[scope][r.route_engine or "?"] += 1
            reasons[scope][r.route_reason or "?"] += 1
    classified = [r for r in autos if r.route_class]
    return {
        "choices": {k: dict(v) for k, v in by_class.items()},
        "reasons": {k: dict(v) for k, v in reasons.items()},
        "class_accuracy": (sum(r.route_class == r.klass for r in classified) / len(classified)) if classified else None,
        "mid_request_fallbacks": sum(1 for r in autos if len(r.engines_used) > 1),
    }


def lossless_check(records: list[RequestRecord]) -> dict:
    """Greedy: every engine's tokens must equal raw's (digest of the token ids)."""
    raw = {_key(r): r.digest for r in records if r.engine == "raw" and r.mode == "greedy"}
    result: dict[str, dict] = {}
    for r in records:
        if r.mode != "greedy" or r.engine == "raw" or not r.digest or _key(r) not in raw:
            continue
        row = result.setdefault(r.engine, {"compared": 0, "equal": 0})
        row["compared"] += 1
        row["equal"] += int(r.digest == raw[_key(r)])
    return result


CONTEXT_SCOPES = ("short context", "long context")


def _in_scope(record: RequestRecord, scope: str) -> bool:
    if scope == "all":
        return True
    if scope in CONTEXT_SCOPES:
        return record.prompt_id.endswith(LONG_SUFFIX) == (scope == "long context")
    return record.klass == scope


def summarize_mode(records: list[RequestRecord]) -> dict:
    records = _ok(records)
    raw_by_key = {_key(r): r for r in records if r.engine == "raw"}
    engines = sorted({r.engine for r in records}, key=_engine_order)
    classes = [k for k in CLASSES if any(r.klass == k for r in records)]
    # the mixed-long workload: prompts behind a pasted context (ids ending in +ctx) and the rest, apart
    contexts = list(CONTEXT_SCOPES) if any(r.prompt_id.endswith(LONG_SUFFIX) for r in records) else []
    scopes = classes + contexts + ["all"]
    table: dict[str, dict[str, dict]] = {}
    for scope in scopes:
        in_scope = [r for r in records if _in_scope(r, scope)]
        table[scope] = {e: engine_stats([r for r in in_scope if r.engine == e], raw_by_key) for e in engines}
        table[scope] = {e: s for e, s in table[scope].items() if s["requests"]}
    return {
        "table": table,
        "regret": {scope: oracle_regret([r for r in records if _in_scope(r, scope)]) for scope in scopes},
        "class_oracle_regret": class_oracle_regret(records),
        "routes": route_summary(records),
        "http": {"regret": oracle_regret(records, "auto@http"), "routes": route_summary(records, "auto@http")},
        "stability": stability([r for r in records if r.engine == "auto"]),
        "lossless": lossless_check(records),
        "goals": goals(table),
    }


def goals(table: dict) -> dict:
    """The issue's goals, measured (None where an engine or lane was not run)."""
    overall = table.get("all", {})

    def agg(scope: str, engine: str) -> float | None:
        return table.get(scope, {}).get(engine, {}).get("decode_tps_aggregate")

    fixed = {e: agg("all", e) for e in ROUTABLE if agg("all", e)}
    best_engine = max(fixed, key=fixed.get) if fixed else None
    per_class = {k: _ratio(agg(k, "auto"), agg(k, "raw")) for k in table if k in CLASSES}
    return {
        "best_fixed_engine": best_engine,
        "auto_vs_best_fixed": _ratio(agg("all", "auto"), fixed.get(best_engine) if best_engine else None),
        "auto_vs_raw_per_class": per_class,
        "auto_vs_raw_overall": _ratio(agg("all", "auto"), agg("all", "raw")),
        "auto_vs_raw_http_overall": _ratio(agg("all", "auto"), agg("all", "raw@http")),
        # both through the HTTP gateway (each lane with its own router): the same comparison end to end
        "auto_http_vs_raw_http_overall": _ratio(agg("all", "auto@http"), agg("all", "raw@http")),
        "auto_http_vs_raw_http_per_class": {k: _ratio(agg(k, "auto@http"), agg(k, "raw@http")) for k in table
                                            if k in CLASSES},
        "auto_vs_best_fixed_per_context": {k: _ratio(agg(k, "auto"), max((agg(k, e) or 0.0) for e in ROUTABLE) or None)
                                           for k in table if k in CONTEXT_SCOPES},
        "runtime_raw_vs_stream_generate": _ratio(agg("all", "raw"), agg("all", "anchor")),
        "http_raw_vs_stream_generate": _ratio(agg("all", "raw@http"), agg("all", "anchor")),
        "median_pairwise_http_raw_vs_anchor": _pairwise_vs(overall, "raw@http", "anchor"),
        "targets": GOALS,
    }


def _pairwise_vs(overall: dict, engine: str, base: str) -> float | None:
    a, b = overall.get(engine), overall.get(base)
    if not a or not b or not a["speedup_vs_raw"]["median"] or not b["speedup_vs_raw"]["median"]:
        return None
    return a["speedup_vs_raw"]["median"] / b["speedup_vs_raw"]["median"]


_ORDER = ("anchor", "raw", "raw@http", "mtp", "ddtree", "ddtree1", "auto", "auto@http")


def _engine_order(engine: str) -> int:
    return _ORDER.index(engine) if engine in _ORDER else len(_ORDER)


def summarize(records: list[RequestRecord], modes: Sequence[str]) -> dict:
    out = {mode: summarize_mode([r for r in records if r.mode == mode]) for mode in modes}
    errors = [f"{r.engine} {r.prompt_id}: {r.error}" for r in records if r.error]
    return {"modes": out, "errors": errors[:50], "error_count": len(errors)}
