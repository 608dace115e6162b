"""`switchyard bench`: every engine on the same workload in ONE process and one run.

For each prompt the lanes run round-robin (the starting lane rotates per prompt, to cancel drift
and order effects): mlx-lm's `stream_generate` (anchor), each fixed engine and `auto` through the
gateway's worker path (`run_request`: chat template, reply parser, the router's per-step
bookkeeping — what a served request runs, less HTTP; `--fixed-path engine`: fixed engines through
Runtime.generate alone, which leaves that per-step work out of their lanes but not out of auto's),
raw and auto through the real HTTP gateway (loopback uvicorn). Auto routes with its own router
(fresh monitor); the fixed lanes' forced requests go through another one, so they teach auto nothing.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import mlx.core as mx

from contracts.sampling import SamplingParams
from engines.cycle_modes import TRIAL_REQUESTS

from .environment import describe_environment
from .http_client import LoopbackGateway, request_body, time_http
from .measure import RequestRecord, time_anchor, time_pipeline, time_runtime
from .setup import DFLASH, BenchModel, fresh_router, load_bench_model, load_classifier
from .workloads import Prompt, load_workload, warm_prompts

log = logging.getLogger("switchyard.bench")

FIXED_ENGINES: tuple[str, ...] = ("raw", "mtp", "ddtree", DFLASH)
ALL_ENGINES: tuple[str, ...] = FIXED_ENGINES + ("auto",)
ANCHOR, RAW_HTTP, AUTO, AUTO_HTTP = "anchor", "raw@http", "auto", "auto@http"
SAMPLED = dict(temperature=1.0, top_p=0.95, top_k=20)   # --sampled-setting fixed (comparable across models)


@dataclass
class BenchConfig:
    workload: str = "mixed"
    engines: tuple[str, ...] = ALL_ENGINES
    max_tokens: int = 256
    repeats: int = 1
    modes: tuple[str, ...] = ("greedy",)
    per_class: int | None = None       # first N prompts of each class (quick runs)
    model: str | None = None
    draft: str | None = None
    dtype: str | None = None           # compute dtype; None = the checkpoint's
    out: Path = Path("bench/out/latest")
    seed: int = 0
    anchor: bool = True
    http_raw: bool = True
    http_auto: bool = True
    policy: str | None = None
    use_labels: bool = False           # route with the workload labels instead of the classifier
    warmup_study: bool = False
    warmup_passes: int = 3
    warm_router: int = 8               # prompts per class (held out of the measured set) that warm auto's routers
    plots: bool = True
    blas_probe: bool = False
    sampled_defaults: bool = False     # sampled mode at the model's generation_config (what clients get)
    fixed_path: str = "gateway"        # fixed lanes through run_request ("gateway") or Runtime.generate ("engine")
    command: str = ""
    extra: dict = field(default_factory=dict)


def sampling_params(mode: str, max_tokens: int, prompt_id: str, repeat: int,
                    sampled: dict = SAMPLED) -> SamplingParams:
    if mode == "greedy":
        return SamplingParams(temperature=0.0, max_tokens=max_tokens)
    seed = zlib.crc32(f"{prompt_id}/{repeat}".encode()) & 0x7FFFFFFF  # same seed for every lane
    return SamplingParams(**sampled, seed=seed, max_tokens=max_tokens)


def model_defaults(generation) -> dict:
    """What a client that sets no sampling fields gets: the model's generation_config."""
    return dict(temperature=generation.temperature, top_p=generation.top_p, top_k=generation.top_k,
                min_p=generation.min_p)


def lanes_for(config: BenchConfig, loaded: tuple[str, ...]) -> list[str]:
    lanes = [ANCHOR] if config.anchor else []
    lanes += [e for e in config.engines if e in FIXED_ENGINES and e in loaded]
    if config.http_raw:
        lanes.append(RAW_HTTP)
    if AUTO in config.engines:
        lanes.append(AUTO)
        if config.http_auto:
            lanes.append(AUTO_HTTP)
    return lanes


class LaneRunner:
    """Runs one (prompt, lane) and returns its RequestRecord. `auto` routes in process with its own
    router; `auto@http` and `raw@http` go through the HTTP gateway (whose router is another one)."""

    def __init__(self, model: BenchModel, port: int | None, router=None, lanes_router=None):
        self.model = model
        self.port = port
        self.router = router
        self.lanes_router = lanes_router   # forced engines through the worker path (None: Runtime.generate)
        self.sequence = 0

    def run(self, lane: str, prompt: Prompt, ids: list[int], params: SamplingParams, mode: str,
            repeat: int) -> RequestRecord:
        record = RequestRecord(prompt.id, prompt.klass, lane, mode, repeat, sequence=self.sequence)
        self.sequence += 1
        mx.reset_peak_memory()
        try:
            if lane == ANCHOR:
                bundle = self.model.runtime.bundle
                time_anchor(bundle.model, bundle.tokenizer, ids, params, record)
            elif lane == AUTO:
                time_pipeline(self.model.runtime, self.router, request_body(list(prompt.messages), params, "auto"), record)
            elif lane in (RAW_HTTP, AUTO_HTTP):
                if self.port is None:
                    record.error = "gateway unavailable"
                else:
                    time_http(self.port, list(prompt.messages), params, "raw" if lane == RAW_HTTP else "auto", record)
            elif self.lanes_router is not None:
                time_pipeline(self.model.timed, self.lanes_router, request_body(list(prompt.messages), params, lane), record)
            else:
                time_runtime(self.model.timed, ids, params, lane, record)
        except Exception as exc:  # noqa: BLE001 - one failing lane is reported, the run goes on
            log.exception("lane %s failed on %s", lane, prompt.id)
            record.error = f"{type(exc).__name__}: {exc}"
        record.peak_memory = int(mx.get_peak_memory())
        return record


def warm_up(runner: LaneRunner, lanes: list[str], prompt: Prompt, ids: list[int]) -> None:
    """One short untimed request per lane: first-call allocation and lazy init stay out of the data.
    The auto lanes are skipped so their routers start with an empty monitor."""
    params = SamplingParams(temperature=0.0, max_tokens=8)
    for lane in lanes:
        if lane not in (AUTO, AUTO_HTTP):
            runner.run(lane, prompt, ids, params, "warmup", 0)
    modes = runner.model.runtime.bundle.cycle_modes
    if modes.adaptive():   # a GPU: each speculative engine settles its cycle mode, as a running server has
        trials = SamplingParams(temperature=0.0, max_tokens=48)
        for lane in lanes:
            if lane in FIXED_ENGINES[1:]:
                for _ in range(2 * TRIAL_REQUESTS):
                    runner.run(lane, prompt, ids, trials, "warmup", 0)
    runner.sequence = 0


def warm_routers(runner: LaneRunner, lanes: list[str], warm: list[Prompt], ids: dict[str, list[int]],
                 config: BenchConfig, sampled: dict) -> None:
    """Untimed traffic through the auto lanes, in every mode, from prompts outside the measured set: the
    routers start the measurement warm, as a server that has served for a while (the monitor's arms are
    per class and decoding mode). `--warm-router 0` measures from an empty monitor instead."""
    for mode in config.modes:
        for prompt in warm:
            params = sampling_params(mode, config.max_tokens, prompt.id, 0, sampled)
            for lane in lanes:
                if lane in (AUTO, AUTO_HTTP):
                    runner.run(lane, prompt, ids[prompt.id], params, "warmup", 0)
    runner.sequence = 0


def run_bench(config: BenchConfig, progress: Callable[[str], None] | None = None) -> dict:
    """Run the benchmark; write JSON + Markdown (+ PNG plots) under config.out; return the results."""
    from gateway.http.app import create_app

    from .report import write_outputs
    from .summary import summarize

    say = progress or (lambda message: print(message, file=sys.stderr, flush=True))
    started = time.time()
    environment = describe_environment()  # at the start: the load average before the run
    prompts = load_workload(config.workload, config.per_class, config.seed, held_out=config.warm_router)
    warm = warm_prompts(config.workload, config.warm_router, config.seed)
    model = load_bench_model(config.model, config.draft, dtype=config.dtype)
    loaded = tuple(model.timed.engine_names)
    say(f"model {model.model_dir} (engines: {', '.join(loaded)}); {len(prompts)} prompts; "
        f"modes {', '.join(config.modes)}; {config.max_tokens} new tokens; {config.repeats} repeat(s)")
    labels = {p.messages[-1]["content"].strip(): p.klass for p in prompts}
    classifier, classifier_name = load_classifier(labels, config.use_labels)
    router = fresh_router(model.runtime.engine_names, classifier, config.policy, config.seed)
    http_router = fresh_router(model.runtime.engine_names, classifier, config.policy, config.seed)
    app = create_app(model.runtime, router=http_router)
    ids = {p.id: model.runtime.encode_chat(list(p.messages)) for p in prompts + warm}
    lanes = lanes_for(config, loaded)
    sampled = model_defaults(model.runtime.bundle.generation) if config.sampled_defaults else SAMPLED
    config.extra["sampled_params"] = sampled
    records: list[RequestRecord] = []
    with LoopbackGateway(app) as gateway:
        lanes_router = (fresh_router(model.timed.engine_names, classifier, config.policy, config.seed)
                        if config.fixed_path == "gateway" else None)
        runner = LaneRunner(model, gateway.port, router, lanes_router)
        warm_up(runner, lanes, prompts[0], ids[prompts[0].id])
        warm_routers(runner, lanes, warm, ids, config, sampled)
        for mode in config.modes:
            for repeat in range(config.repeats):
                for index, prompt in enumerate(prompts):
                    params = sampling_params(mode, config.max_tokens, prompt.id, repeat, sampled)
                    shift = index % len(lanes)
                    for lane in lanes[shift:] + lanes[:shift]:
                        records.append(runner.run(lane, prompt, ids[prompt.id], params, mode, repeat))
                    say(_progress_line(mode, repeat, index, len(prompts), prompt, records[-len(lanes):]))
        router_stats = router.stats()
        http_router_stats = http_router.stats()
    warmup = None
    if config.warmup_study:
        from .warmup import run_warmup_study

        warmup = run_warmup_study(model, prompts, classifier, config, say)
    blas = None
    if config.blas_probe:
        from .blas_probe import compare

        say("[blas probe] reference BLAS vs OpenBLAS in two child processes")
        try:
            blas = compare(str(model.model_dir), ["--context", "128", "--trials", "5"]
                           + (["--dtype", config.dtype] if config.dtype else []))
        except (SystemExit, Exception) as exc:  # noqa: BLE001 - no OpenBLAS here: say so in the report
            blas = {"error": str(exc)}
    results = {
        "config": _config_json(config, classifier_name, lanes),
        "environment": environment,
        "model": {"dir": str(model.model_dir), "draft": str(model.draft_dir) if model.draft_dir else None,
                  "engines": list(loaded), "memory": model.runtime.memory_bytes()},
        "records": [r.as_json() for r in records],
        "router_stats": router_stats,
        "cycle_modes": model.runtime.bundle.cycle_modes.stats(),
        "http_router_stats": http_router_stats,
        "warmup_study": warmup,
        "blas_probe": blas,
        "wall_seconds": time.time() - started,
        "load_average_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    results["summary"] = summarize(records, config.modes)
    write_outputs(results, config.out, plots=config.plots)
    return results


def _progress_line(mode: str, repeat: int, index: int, total: int, prompt: Prompt, recent: list[RequestRecord]) -> str:
    parts = []
    for r in recent:
        label = f"{r.engine}->{r.route_engine}" if r.engine in (AUTO, AUTO_HTTP) else r.engine
        parts.append(f"{label} ERR" if r.error else f"{label} {r.decode_tps:.0f}")
    return f"[{mode} r{repeat} {index + 1}/{total}] {prompt.id}: " + ", ".join(parts)


def _config_json(config: BenchConfig, classifier_name: str, lanes: list[str]) -> dict:
    return {
        "workload": config.workload, "engines": list(config.engines), "lanes": lanes,
        "dtype": config.dtype or "checkpoint", "max_tokens": config.max_tokens, "repeats": config.repeats,
        "modes": list(config.modes), "fixed_path": config.fixed_path,
        "per_class": config.per_class, "warm_router": config.warm_router, "seed": config.seed,
        "sampled_params": SAMPLED,  # extra overrides
        "policy": config.policy or "<built-in defaults>", "classifier": classifier_name,
        "command": config.command, **config.extra,
    }


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, default=_jsonable) + "\n")


def _jsonable(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)
