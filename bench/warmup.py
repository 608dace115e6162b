"""Warm-up study: an EMPTY monitor, the mixed workload through `auto` only (HTTP gateway), and per
class how many requests the router needs before its choice stops changing.

Steady choice of a class = the engine the router picks most often by "monitor" in the last third
of that class's requests. Requests to stable = 1 + the index of the last monitor decision that
differs from it (exploration draws are counted apart: they are deliberate, not instability).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

from .http_client import LoopbackGateway, time_http
from .measure import RequestRecord
from .setup import BenchModel, fresh_router
from .workloads import CLASSES, Prompt


def stability(records: Sequence[RequestRecord]) -> dict:
    """Per class: steady engine, requests until stable, exploration count, choice sequence."""
    out: dict[str, dict] = {}
    for klass in CLASSES:
        seq = [r for r in records if r.klass == klass and r.route_engine]
        if not seq:
            continue
        decided = [(i, r.route_engine) for i, r in enumerate(seq) if r.route_reason != "explore"]
        tail = [e for i, e in decided if i >= len(seq) * 2 // 3] or [e for _, e in decided]
        steady = Counter(tail).most_common(1)[0][0] if tail else None
        changed = [i for i, e in decided if e != steady]
        out[klass] = {
            "requests": len(seq),
            "steady_engine": steady,
            "requests_to_stable": (changed[-1] + 2 if changed else 1) if steady else None,
            "stable_within_run": bool(steady) and (not changed or changed[-1] + 1 < len(seq)),
            "explorations": sum(r.route_reason == "explore" for r in seq),
            "choices": [f"{r.route_engine}:{r.route_reason}" for r in seq],
        }
    return out


def run_warmup_study(model: BenchModel, prompts: Sequence[Prompt], classifier, config,
                     say: Callable[[str], None]) -> dict:
    from gateway.http.app import create_app

    from .run import sampling_params

    router = fresh_router(model.runtime.engine_names, classifier, config.policy, config.seed + 1)
    app = create_app(model.runtime, router=router)
    records: list[RequestRecord] = []
    with LoopbackGateway(app) as gateway:
        for repeat in range(config.warmup_passes):
            for prompt in prompts:
                params = sampling_params("greedy", config.max_tokens, prompt.id, repeat)
                record = RequestRecord(prompt.id, prompt.klass, "auto", "warmup", repeat, sequence=len(records))
                records.append(time_http(gateway.port, list(prompt.messages), params, "auto", record))
            say(f"[warm-up study] pass {repeat + 1}/{config.warmup_passes}: {len(records)} requests")
        stats = router.stats()
    return {
        "passes": config.warmup_passes,
        "requests": len(records),
        "per_class": stability(records),
        "records": [r.as_json() for r in records],
        "final_predictions": {k: v["engines"] for k, v in stats["classes"].items()},
    }
