"""The router's interface as the worker sees it: what a request shows, what the router decides.

The adaptive router (router.py) implements it; StaticRouter is what an app gets without one.
Every method runs on the worker thread (gateway/worker/pipeline.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from contracts.engine import StepResult, SwitchRule
from contracts.request_text import RequestText


@dataclass(frozen=True)
class RouteRequest:
    """What the router may look at for one request."""

    text: RequestText           # system / last user / history text and response_format, built at the edge
    forced_engine: str | None   # request field `engine` / header X-Switchyard-Engine; None or "auto" = route
    prompt_tokens: int
    queue_depth: int            # requests waiting in the scheduler when this one was admitted
    sampled: bool = False       # temperature > 0 (after the model's defaults): acceptance differs from greedy
    concurrent: int = 0         # other requests running on the worker when this one started (batch company)


@dataclass(frozen=True)
class RouteDecision:
    engine: str
    klass: str                  # one of contracts.names.CLASSES
    reason: str                 # one of contracts.names.ROUTE_REASONS
    switch: SwitchRule | None = None    # when the request may change engine mid-way (None: never)
    predicted: dict[str, float] = field(default_factory=dict)  # engine -> predicted tok/s (for stats)
    policy_version: int = 0     # the policy snapshot this request was admitted with
    sampled: bool = False       # decoding mode: the monitor keeps greedy and sampled statistics apart
    pooled: bool = False        # the class was uncertain: routed on, and learned into, engine-level statistics
    context_tokens: int = 0     # prompt tokens: the request's context when it starts (its cost band)


@dataclass(frozen=True)
class LoadReading:
    """What the worker measured of its rounds (one step of every running request), for admission."""

    running: int                   # requests running on the worker now
    max_running: int               # serve --max-batch: the most that may ever run at once
    token_seconds: float | None    # per-token latency of the slowest decoding stream: EWMA over decode rounds of
                                   # round seconds / its tokens; None until measured
    measured_running: int = 0      # requests running when token_seconds was measured (it may lag `running`)


@dataclass(frozen=True)
class AdmissionLimit:
    """How many requests may run at once now (the policy's latency SLO, batching.max_token_latency_ms)."""

    requests: int | None = None          # None: no SLO, --max-batch alone limits; else >= 1
    exempt_priority: int | None = None   # a waiting request of at least this priority may start beyond `requests`


class Router(Protocol):
    def choose(self, request: RouteRequest) -> RouteDecision:
        """Pick an engine. Runs on the worker thread before the request's prefill: must be fast and
        never raise for valid input."""
        ...

    def observe(self, decision: RouteDecision, step: StepResult) -> None:
        """Feed one engine step to the monitor (called on the worker thread)."""
        ...

    def finished(self, decision: RouteDecision, error: BaseException | None) -> None:
        """Request done; a non-None error from the engine may quarantine it."""
        ...


class StaticRouter:
    """Default router before the adaptive one: a forced engine if asked, else raw (reason "fallback")."""

    def __init__(self, engine_names: tuple[str, ...]):
        self.engine_names = tuple(engine_names)

    def choose(self, request: RouteRequest) -> RouteDecision:
        forced = request.forced_engine
        if forced not in (None, "auto") and forced in self.engine_names:
            return RouteDecision(engine=forced, klass="prose", reason="forced")
        return RouteDecision(engine="raw", klass="prose", reason="fallback")

    def observe(self, decision: RouteDecision, step: StepResult) -> None:
        pass

    def finished(self, decision: RouteDecision, error: BaseException | None) -> None:
        pass
