"""The router's interface as the HTTP layer sees it. Implementations live in gateway/router.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from engines.types import FallbackRule, StepResult

CLASSES: tuple[str, ...] = ("code", "prose", "structured")
REASONS: tuple[str, ...] = ("forced", "rule", "monitor", "explore", "fallback", "health")


@dataclass(frozen=True)
class RouteRequest:
    """What the router may look at for one request."""

    system_text: str            # system prompt(s), "" if none
    user_text: str              # last user message, or the completion prompt
    history_text: str           # earlier turns (weighted lower by the classifier)
    forced_engine: str | None   # request field `engine` / header X-Switchyard-Engine; None or "auto" = route
    prompt_tokens: int
    response_format: str | None  # "text", "json_object", "json_schema", or None
    queue_depth: int            # requests waiting in the scheduler when this one was admitted
    sampled: bool = False       # temperature > 0 (after the model's defaults): acceptance differs from greedy


@dataclass(frozen=True)
class RouteDecision:
    engine: str
    klass: str                  # one of CLASSES
    reason: str                 # one of REASONS
    fallback: FallbackRule | None = None  # mid-request hand-off rule for speculative engines
    predicted: dict[str, float] = field(default_factory=dict)  # engine -> predicted tok/s (for stats)
    policy_version: int = 0     # the policy snapshot this request was admitted with
    sampled: bool = False       # decoding mode: the monitor keeps greedy and sampled statistics apart


class Router(Protocol):
    def choose(self, request: RouteRequest) -> RouteDecision:
        """Pick an engine. Must be fast (runs on the event loop) and never raise for valid input."""
        ...

    def observe(self, decision: RouteDecision, step: StepResult) -> None:
        """Feed one engine step to the monitor (called on the worker thread)."""
        ...

    def finished(self, decision: RouteDecision, error: BaseException | None) -> None:
        """Request done; a non-None error from the engine may quarantine it."""
        ...
