"""What the worker thread runs for one request: tokenize, route, generate (feeding the router)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Iterator

from contracts.engine import Backend, CancelToken, GenerationChunk
from contracts.errors import InvalidRequestError
from gateway.routing.interface import RouteDecision, Router, RouteRequest

from .spec import RequestSpec

log = logging.getLogger("switchyard.gateway")


@dataclass(frozen=True)
class Routed:
    """First item of every request: the route taken and the prompt length."""

    decision: RouteDecision
    prompt_tokens: int


def run_request(
    backend: Backend, router: Router, spec: RequestSpec, cancel: CancelToken, queue_depth: int
) -> Iterator[Routed | GenerationChunk]:
    prompt_ids = backend.encode_chat(spec.messages) if spec.messages is not None else backend.encode_prompt(spec.prompt or "")
    params = spec.params
    room = backend.context_length - len(prompt_ids)
    if spec.max_tokens_defaulted and 0 < room < params.max_tokens:
        params = replace(params, max_tokens=room)   # unasked: stop at the context's end instead of refusing
    decision = router.choose(
        RouteRequest(
            text=spec.text,
            forced_engine=spec.forced_engine,
            prompt_tokens=len(prompt_ids),
            queue_depth=queue_depth,
            sampled=(params.temperature if params.temperature is not None else backend.default_temperature) > 0,
        )
    )
    yield Routed(decision, len(prompt_ids))
    error: BaseException | None = None
    try:
        for chunk in backend.generate(prompt_ids, params, decision.engine, cancel, switch=decision.switch):
            if chunk.step is not None:
                _safely(router.observe, decision, chunk.step)
            yield chunk
    except InvalidRequestError:
        raise  # the request's fault, not the engine's: no quarantine
    except Exception as exc:
        error = exc
        raise
    finally:
        _safely(router.finished, decision, error)


def _safely(fn, *args) -> None:
    """A monitor/router bug must not break the request being served; it is logged loudly."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001
        log.exception("router callback %s failed", getattr(fn, "__name__", fn))
