"""Prometheus metrics of the gateway: prefix switchyard_, base units, _total counters, bounded labels.

Each app owns its registry (tests run several apps in one process). Label values are clamped to
known enums so no request can create a new series.
"""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from engines.types import ENGINE_NAMES

from .routing import CLASSES

ENDPOINTS: tuple[str, ...] = ("chat_completions", "completions", "models", "health", "metrics", "other")
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "cancelled", "error")
NONE = "none"      # engine/class before a route was chosen
OTHER = "other"    # any value outside the enum

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def bounded(value: str | None, allowed: tuple[str, ...]) -> str:
    if value is None:
        return NONE
    return value if value in allowed else OTHER


def status_label(status: int) -> str:
    return str(status) if 100 <= status <= 599 else OTHER


class GatewayMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "switchyard_requests", "HTTP requests by endpoint, engine, class and status code",
            ["endpoint", "engine", "class", "status"], registry=r,
        )
        self.prompt_tokens = Counter("switchyard_prompt_tokens", "Prompt tokens processed", ["engine", "class"], registry=r)
        self.generation_tokens = Counter(
            "switchyard_generation_tokens", "Completion tokens generated", ["engine", "class"], registry=r
        )
        self.finish_reasons = Counter("switchyard_finish_reasons", "Finished generations by reason", ["reason"], registry=r)
        self.client_disconnects = Counter(
            "switchyard_client_disconnects", "Requests whose client went away before the end", ["endpoint"], registry=r
        )
        self.ttft = Histogram(
            "switchyard_time_to_first_token_seconds", "Request arrival to first completion token",
            ["engine"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.e2e = Histogram(
            "switchyard_e2e_request_latency_seconds", "Request arrival to last byte of the generation",
            ["engine"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.waiting = Gauge("switchyard_requests_waiting", "Requests queued behind the running one", registry=r)
        self.running = Gauge("switchyard_requests_running", "Requests generating now (0 or 1)", registry=r)
        self.worker_up = Gauge("switchyard_worker_up", "1 while the model worker thread is alive", registry=r)

    def bind_scheduler(self, waiting: Callable[[], float], running: Callable[[], float], up: Callable[[], float]) -> None:
        self.waiting.set_function(waiting)
        self.running.set_function(running)
        self.worker_up.set_function(up)

    def count_request(self, endpoint: str, engine: str | None, klass: str | None, status: int) -> None:
        self.requests.labels(
            bounded(endpoint, ENDPOINTS), bounded(engine, ENGINE_NAMES), bounded(klass, CLASSES), status_label(status)
        ).inc()

    def count_generation(
        self, engine: str, klass: str, prompt_tokens: int, completion_tokens: int, finish_reason: str | None,
        ttft_s: float | None, e2e_s: float,
    ) -> None:
        e, k = bounded(engine, ENGINE_NAMES), bounded(klass, CLASSES)
        self.prompt_tokens.labels(e, k).inc(prompt_tokens)
        self.generation_tokens.labels(e, k).inc(completion_tokens)
        self.finish_reasons.labels(bounded(finish_reason or "error", FINISH_REASONS)).inc()
        if ttft_s is not None:
            self.ttft.labels(e).observe(ttft_s)
        self.e2e.labels(e).observe(e2e_s)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
