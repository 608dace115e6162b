"""Prometheus metrics of the gateway: prefix switchyard_, base units, _total counters, bounded labels.

Each app owns its registry (tests run several apps in one process). Label values are clamped to
known enums so no request can create a new series. Every metric is listed in the README's Metrics section.

Who calls what:
  - the HTTP layer: count_request() per response, start_generation() once the worker picked a
    request up (queue time), RequestMeter.step() per engine step, count_generation() at the end;
  - create_app(): bind_scheduler(), bind_backend() (memory, loaded engines), bind_router()
    (classifier latency, policy info);
  - the graceful shutdown: draining.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from contracts.engine import Backend, StepResult
from contracts.names import CLASSES, ENGINE_NAMES
from gateway.routing.interface import RouteDecision
from gateway.routing.router import AdaptiveRouter

from .collectors import BackendCollector, CallbackCounter, PolicyInfoCollector, TimedClassifier, build_info_labels
from .router_collector import RouterCollector

disable_created_metrics()  # no *_created series: they double the series count and no panel uses them

GENERATION_ENDPOINTS: tuple[str, ...] = ("chat_completions", "completions", "messages", "responses", "ollama")
ENDPOINTS: tuple[str, ...] = (*GENERATION_ENDPOINTS, "embeddings", "models", "health", "metrics", "other")
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "tool_calls", "cancelled", "error")
NONE = "none"      # engine/class before a route was chosen
OTHER = "other"    # any value outside the enum
MAX_DRAFT_POSITION = 16  # draft positions beyond this share the label "16"

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# Per-token and per-step times: a 27B model decodes at ~25-60 ms/token on an M3 Ultra, tiny ones at ~1 ms.
STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
                0.2, 0.3, 0.5, 1.0, 2.5)
# The classifier's budget is 1 ms at p99.
CLASSIFIER_BUCKETS = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.0025, 0.005, 0.01, 0.025, 0.1)
# Accepted draft tokens are integers: le="0" counts steps that accepted nothing.
ACCEPTED_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 12, 16)


def bounded(value: str | None, allowed: tuple[str, ...]) -> str:
    if value is None:
        return NONE
    return value if value in allowed else OTHER


def status_label(status: int) -> str:
    return str(status) if 100 <= status <= 599 else OTHER


def position_label(index: int) -> str:
    """1-based draft position, clamped so a huge tree budget cannot create many series."""
    return str(min(index + 1, MAX_DRAFT_POSITION))


class GatewayMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        ec = ["engine", "class"]
        # --- requests -------------------------------------------------------------------------
        self.requests = Counter(
            "switchyard_requests", "HTTP requests by endpoint, engine, class and status code",
            ["endpoint", "engine", "class", "status"], registry=r,
        )
        self.prompt_tokens = Counter("switchyard_prompt_tokens", "Prompt tokens processed", ec, registry=r)
        self.generation_tokens = Counter(
            "switchyard_generation_tokens", "Completion tokens generated (usage.completion_tokens)", ec, registry=r
        )
        self.finish_reasons = Counter("switchyard_finish_reasons", "Finished generations by reason", ["reason"], registry=r)
        self.client_disconnects = Counter(
            "switchyard_client_disconnects", "Requests whose client went away before the end", ["endpoint"], registry=r
        )
        # --- latency --------------------------------------------------------------------------
        self.ttft = Histogram(
            "switchyard_time_to_first_token_seconds", "Request arrival to first completion token",
            ["engine"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.tpot = Histogram(
            "switchyard_time_per_output_token_seconds",
            "Mean time between completion tokens after the first, per request: (e2e - ttft) / (tokens - 1)",
            ["engine"], buckets=STEP_BUCKETS, registry=r,
        )
        self.e2e = Histogram(
            "switchyard_e2e_request_latency_seconds", "Request arrival to last byte of the generation",
            ["engine"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.queue_time = Histogram(
            "switchyard_queue_time_seconds",
            "Request arrival until the model worker started it (queue wait, tokenization and routing)",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.prefill_time = Histogram(
            "switchyard_prefill_seconds", "Wall time of a request's first engine step: prompt prefill plus first token",
            ["engine"], buckets=LATENCY_BUCKETS, registry=r,
        )
        # --- engine steps and speculation ------------------------------------------------------
        self.steps = Counter("switchyard_engine_steps", "Engine steps (decode steps or draft+verify cycles)", ec, registry=r)
        self.step_tokens = Counter(
            "switchyard_engine_tokens", "Tokens emitted by engine steps (before stop/length truncation)", ec, registry=r
        )
        self.step_seconds = Histogram(
            "switchyard_engine_step_seconds", "Wall time of one engine step after the first (decode only)",
            ["engine"], buckets=STEP_BUCKETS, registry=r,
        )
        self.drafts = Counter("switchyard_spec_drafts", "Speculative verify steps that had a draft", ec, registry=r)
        self.draft_tokens = Counter("switchyard_spec_draft_tokens", "Draft tokens proposed for verification", ec, registry=r)
        self.accepted_tokens = Counter(
            "switchyard_spec_accepted_tokens", "Draft tokens accepted by the target's verify", ec, registry=r
        )
        self.accepted_per_step = Histogram(
            "switchyard_spec_accepted_tokens_per_step", "Accepted draft tokens per speculative verify step",
            ec, buckets=ACCEPTED_BUCKETS, registry=r,
        )
        self.position_drafted = Counter(
            "switchyard_spec_position_drafted", "Verify steps that drafted a token at this depth (1-based, 16 = 16+)",
            ["engine", "position"], registry=r,
        )
        self.position_accepted = Counter(
            "switchyard_spec_position_accepted", "Verify steps whose accepted path reached this depth",
            ["engine", "position"], registry=r,
        )
        self.handoffs = Counter(
            "switchyard_engine_handoffs", "Requests a speculative engine handed to raw mid-generation (low acceptance)",
            ["engine"], registry=r,
        )
        # --- routing ---------------------------------------------------------------------------
        self.classifier_latency = Histogram(
            "switchyard_classifier_latency_seconds", "Request classifier prediction time", buckets=CLASSIFIER_BUCKETS,
            registry=r,
        )
        # --- scheduler, process ----------------------------------------------------------------
        self.waiting = Gauge("switchyard_requests_waiting", "Requests queued behind the running one", registry=r)
        self.running = Gauge("switchyard_requests_running", "Requests generating now (0 or 1)", registry=r)
        self.worker_up = Gauge("switchyard_worker_up", "1 while the model worker thread is alive", registry=r)
        self.queue_capacity = Gauge(
            "switchyard_queue_capacity", "Requests allowed to wait behind the running one (more get 429)", registry=r
        )
        self.running_limit = Gauge(
            "switchyard_batch_running_limit",
            "Requests that may run at once now: --max-batch, or fewer while the latency SLO "
            "(batching.max_token_latency_ms) holds new ones back", registry=r,
        )
        self.token_latency = Gauge(
            "switchyard_batch_token_latency_seconds",
            "Per-token latency of the slowest decoding stream, measured by the worker (EWMA over decode rounds; "
            "NaN until measured)", registry=r,
        )
        self.waiting_memory = Gauge(
            "switchyard_requests_waiting_memory",
            "Requests routed but waiting for the running ones to free memory (--request-memory-bytes); counted in "
            "switchyard_requests_waiting too", registry=r,
        )
        self.memory_reserved = Gauge(
            "switchyard_request_memory_reserved_bytes",
            "Bytes the running requests' caches hold together, each with room for 256 more tokens (at most its "
            "prompt + max_tokens)", registry=r,
        )
        self.memory_budget = Gauge(
            "switchyard_request_memory_budget_bytes",
            "--request-memory-bytes: what the running requests' caches may reach together (0: no budget)", registry=r,
        )
        self.draining = Gauge("switchyard_draining", "1 while the server drains for shutdown (no new requests)", registry=r)
        self.start_time = Gauge("switchyard_start_time_seconds", "Unix time the gateway started", registry=r)
        self.start_time.set(time.time())
        self.build_info = Gauge(
            "switchyard_build_info", "Always 1; versions of the gateway and its main libraries as labels",
            ["version", "python_version", "mlx_version", "mlx_lm_version"], registry=r,
        )
        self.build_info.labels(**build_info_labels()).set(1)
        self._start_every_series()

    def _start_every_series(self) -> None:
        """Every labelled family at 0 for its known label values, so a fresh server's first scrape
        already has each series a dashboard panel or alert queries (no "No data" until an event)."""
        speculative = [e for e in ENGINE_NAMES if e != "raw"]
        for engine in ENGINE_NAMES:
            for histogram in (self.ttft, self.tpot, self.e2e, self.prefill_time, self.step_seconds):
                histogram.labels(engine)
            for klass in CLASSES:
                for counter in (self.prompt_tokens, self.generation_tokens, self.steps, self.step_tokens):
                    counter.labels(engine, klass)
                for endpoint in GENERATION_ENDPOINTS:
                    self.requests.labels(endpoint, engine, klass, "200")
        for engine in speculative:
            self.handoffs.labels(engine)
            for klass in CLASSES:
                for family in (self.drafts, self.draft_tokens, self.accepted_tokens, self.accepted_per_step):
                    family.labels(engine, klass)
            for index in range(MAX_DRAFT_POSITION):
                self.position_drafted.labels(engine, position_label(index))
                self.position_accepted.labels(engine, position_label(index))
        for reason in FINISH_REASONS:
            self.finish_reasons.labels(reason)
        for endpoint in GENERATION_ENDPOINTS:
            self.client_disconnects.labels(endpoint)

    # --- binding (create_app) ------------------------------------------------------------------
    def bind_scheduler(
        self, waiting: Callable[[], float], running: Callable[[], float], up: Callable[[], float],
        capacity: int | None = None, running_limit: Callable[[], float] | None = None,
        token_latency: Callable[[], float] | None = None, waiting_memory: Callable[[], float] | None = None,
        reserved: Callable[[], float] | None = None, memory_budget: int | None = None,
        released: Callable[[], float] | None = None,
    ) -> None:
        if capacity is not None:
            self.queue_capacity.set(capacity)
        self.waiting.set_function(waiting)
        self.running.set_function(running)
        self.worker_up.set_function(up)
        if running_limit is not None:
            self.running_limit.set_function(running_limit)
        self.token_latency.set_function(token_latency or (lambda: math.nan))
        self.waiting_memory.set_function(waiting_memory or (lambda: 0.0))
        self.memory_reserved.set_function(reserved or (lambda: 0.0))
        self.memory_budget.set(memory_budget or 0)
        self.registry.register(CallbackCounter(
            "switchyard_requests_released",
            "Times a running request gave its caches back for the memory budget (--request-memory-bytes) and waited, "
            "to go on from its last token once they fit", released or (lambda: 0.0)))

    def bind_backend(self, backend: Backend) -> None:
        """Model memory (read at scrape time) and which engines are loaded."""
        self.registry.register(BackendCollector(backend))

    def bind_router(self, router: Any) -> None:
        """Time the adaptive router's classifier and expose its policy and monitor, when it has them."""
        classifier = getattr(router, "classifier", None)
        if classifier is not None and not isinstance(classifier, TimedClassifier):
            router.classifier = TimedClassifier(classifier, self.classifier_latency)
        if isinstance(router, AdaptiveRouter):
            self.registry.register(PolicyInfoCollector(router.store))
            self.registry.register(RouterCollector(router))

    # --- per request ------------------------------------------------------------------------------
    def count_request(self, endpoint: str, engine: str | None, klass: str | None, status: int) -> None:
        self.requests.labels(
            bounded(endpoint, ENDPOINTS), bounded(engine, ENGINE_NAMES), bounded(klass, CLASSES), status_label(status)
        ).inc()

    def start_generation(self, decision: RouteDecision, queue_seconds: float) -> RequestMeter:
        """The worker started a request: record its queue time; the meter then takes its steps."""
        self.queue_time.observe(max(0.0, queue_seconds))
        return RequestMeter(self, decision)

    def observe_step(self, klass: str, step: StepResult, first: bool = False) -> None:
        """One engine step (runs for every step: keep it cheap)."""
        e, k = bounded(step.engine, ENGINE_NAMES), bounded(klass, CLASSES)
        self.steps.labels(e, k).inc()
        self.step_tokens.labels(e, k).inc(len(step.tokens))
        if first:
            self.prefill_time.labels(e).observe(step.seconds)
        else:
            self.step_seconds.labels(e).observe(step.seconds)
        if step.drafted <= 0:
            return
        self.drafts.labels(e, k).inc()
        self.draft_tokens.labels(e, k).inc(step.drafted)
        self.accepted_tokens.labels(e, k).inc(step.accepted)
        self.accepted_per_step.labels(e, k).observe(step.accepted)
        for index, accepted in enumerate(step.accepted_positions):
            position = position_label(index)
            self.position_drafted.labels(e, position).inc()
            if accepted:
                self.position_accepted.labels(e, position).inc()

    def count_generation(
        self, engine: str, klass: str, prompt_tokens: int, completion_tokens: int, finish_reason: str | None,
        ttft_s: float | None, e2e_s: float,
    ) -> None:
        e, k = bounded(engine, ENGINE_NAMES), bounded(klass, CLASSES)
        self.prompt_tokens.labels(e, k).inc(prompt_tokens)
        self.generation_tokens.labels(e, k).inc(completion_tokens)
        # None: the generation ended without a finish reason (cancelled by a client or the shutdown drain)
        self.finish_reasons.labels(bounded(finish_reason or "cancelled", FINISH_REASONS)).inc()
        if ttft_s is not None:
            self.ttft.labels(e).observe(ttft_s)
            if completion_tokens > 1:
                self.tpot.labels(e).observe(max(0.0, e2e_s - ttft_s) / (completion_tokens - 1))
        self.e2e.labels(e).observe(e2e_s)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class RequestMeter:
    """Step metrics of one request as they happen: its first step is the prefill, and a change of
    engine mid-request (a speculative engine handing off to raw) is counted once."""

    def __init__(self, metrics: GatewayMetrics, decision: RouteDecision):
        self._metrics = metrics
        self._decision = decision
        self._steps = 0
        self._handed_off = False

    def step(self, step: StepResult) -> None:
        self._metrics.observe_step(self._decision.klass, step, first=self._steps == 0)
        self._steps += 1
        if not self._handed_off and step.engine != self._decision.engine:
            self._handed_off = True
            self._metrics.handoffs.labels(bounded(self._decision.engine, ENGINE_NAMES)).inc()
