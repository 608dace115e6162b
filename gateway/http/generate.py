"""POST /v1/chat/completions and /v1/completions: validate, queue, then answer as JSON or SSE."""

from __future__ import annotations

import json
import time
from typing import Any, AsyncIterator

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contracts.engine import GenerationChunk
from gateway.observability.metrics import RequestMeter
from gateway.routing.interface import RouteDecision
from gateway.worker.errors import QueueFull, WorkerError, WorkerUnavailable
from gateway.worker.pipeline import Routed, run_request
from gateway.worker.scheduler import Ticket

from .disconnect import DisconnectWatcher
from .errors import APIError, bad_request, from_exception, from_validation_error
from .request_spec import chat_spec, completion_spec, resolve_engine
from .responses import ResponseBuilder
from .schemas import ChatCompletionRequest, CompletionRequest
from .sse import DONE, SSEResponse, event
from .state import GatewayState

CLIENT_CLOSED = 499  # nginx's "client closed request", used only in metrics


def route_headers(decision: RouteDecision) -> dict[str, str]:
    return {
        "X-Switchyard-Engine": decision.engine,
        "X-Switchyard-Class": decision.klass,
        "X-Switchyard-Route-Reason": decision.reason,
    }


async def read_json_object(request: Request, max_bytes: int) -> dict[str, Any]:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media and media != "application/json" and not media.endswith("+json"):
        raise APIError(415, f"Content-Type must be application/json, not {media!r}.", code="unsupported_media_type")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise APIError(413, f"Request body is larger than {max_bytes} bytes.", code="request_too_large")
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > max_bytes:
            raise APIError(413, f"Request body is larger than {max_bytes} bytes.", code="request_too_large")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: absurdly deep nesting
        raise bad_request("We could not parse the JSON body of your request.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request("The request body must be a JSON object.", code="invalid_json")
    return data


def parse(model: type[BaseModel], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


class RequestRecord:
    """Timings, tokens and outcome of one generation, reported to the metrics once at the end."""

    def __init__(self, state: GatewayState, endpoint: str):
        self.state = state
        self.endpoint = endpoint
        self.started = time.perf_counter()
        self.decision: RouteDecision | None = None
        self.meter: RequestMeter | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.finish_reason: str | None = None
        self.first_token_s: float | None = None
        self.text: list[str] = []
        self._done = False

    def routed(self, item: Routed) -> None:
        self.decision = item.decision
        self.prompt_tokens = item.prompt_tokens
        self.meter = self.state.metrics.start_generation(item.decision, time.perf_counter() - self.started)

    def chunk(self, chunk: GenerationChunk) -> None:
        if chunk.step is not None and self.meter is not None:
            self.meter.step(chunk.step)  # per-step speculation metrics
        if self.first_token_s is None and chunk.token_ids:
            self.first_token_s = time.perf_counter() - self.started
        self.completion_tokens = chunk.completion_tokens or (self.completion_tokens + len(chunk.token_ids))
        if chunk.prompt_tokens:
            self.prompt_tokens = chunk.prompt_tokens
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        self.text.append(chunk.text)

    def done(self, status: int, disconnected: bool = False) -> None:
        if self._done:
            return
        self._done = True
        metrics = self.state.metrics
        engine = self.decision.engine if self.decision else None
        klass = self.decision.klass if self.decision else None
        if disconnected:
            metrics.client_disconnects.labels(self.endpoint).inc()
            status = CLIENT_CLOSED
        metrics.count_request(self.endpoint, engine, klass, status)
        if self.decision is not None:
            finish = self.finish_reason if status == 200 else ("cancelled" if disconnected else "error")
            metrics.count_generation(
                self.decision.engine, self.decision.klass, self.prompt_tokens, self.completion_tokens,
                finish, self.first_token_s, time.perf_counter() - self.started,
            )


async def chat_completions(request: Request) -> Response:
    return await _generate(request, chat=True)


async def completions(request: Request) -> Response:
    return await _generate(request, chat=False)


async def _admit(request: Request, state: GatewayState, chat: bool) -> tuple[Any, Ticket]:
    """Read, validate and queue the request (raises APIError 400/404/413/415, QueueFull, WorkerUnavailable)."""
    if state.scheduler.full:  # no point reading a body that cannot be queued
        raise QueueFull(state.config.retry_after_seconds)
    with request.app.state.body_budget.slot():
        data = await read_json_object(request, state.config.max_body_bytes)
    req = parse(ChatCompletionRequest if chat else CompletionRequest, data)
    if req.model is not None and req.model not in state.model_names:
        raise APIError(
            404, f"The model {req.model!r} does not exist; this server serves {state.backend.model_id!r}.",
            param="model", code="model_not_found",
        )
    forced = resolve_engine(req.engine, request.headers.get("x-switchyard-engine"), tuple(state.backend.engine_names))
    spec = chat_spec(req, forced, state.config) if chat else completion_spec(req, forced, state.config)
    backend, router = state.backend, state.router
    ticket = state.scheduler.submit(lambda t: run_request(backend, router, spec, t.cancel_token, t.admitted_depth))
    return req, ticket


async def _start(
    ticket: Ticket, record: RequestRecord, watcher: DisconnectWatcher
) -> Response | tuple[dict[str, str], GenerationChunk | None]:
    """Wait for the route and the first chunk, so errors raised before any output (prompt too long,
    engine unavailable, a failing prefill) are plain HTTP errors, for streams too."""
    headers: dict[str, str] = {}
    first: GenerationChunk | None = None
    try:
        routed = await ticket.next()
        record.routed(routed)
        headers = route_headers(routed.decision)
        first = await ticket.next()
        record.chunk(first)
    except StopAsyncIteration:
        pass  # cancelled (client gone, server stopping) or nothing generated
    except Exception as exc:
        watcher.stop()
        err = from_exception(exc)
        record.done(err.status, disconnected=watcher.disconnected)
        return err.response(headers)
    if watcher.disconnected:
        watcher.stop()
        record.done(CLIENT_CLOSED, disconnected=True)
        return Response(status_code=CLIENT_CLOSED)
    if record.decision is None:  # dropped from the queue without a disconnect: the server is stopping
        watcher.stop()
        err = from_exception(WorkerUnavailable("The server is shutting down."))
        record.done(err.status)
        return err.response()
    return headers, first


async def _generate(request: Request, chat: bool) -> Response:
    state: GatewayState = request.app.state.gateway
    record = RequestRecord(state, "chat_completions" if chat else "completions")
    try:
        req, ticket = await _admit(request, state, chat)
    except (APIError, WorkerError) as exc:
        err = from_exception(exc)
        record.done(err.status)
        return err.response()
    watcher = DisconnectWatcher(request.receive, ticket.cancel)
    started = await _start(ticket, record, watcher)
    if isinstance(started, Response):
        return started
    headers, first = started
    builder = ResponseBuilder(chat=chat, model=state.backend.model_id)
    headers["X-Request-Id"] = builder.id
    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return _stream_response(ticket, first, record, watcher, builder, headers, include_usage)
    return await _json_response(ticket, record, watcher, builder, headers)


async def _json_response(
    ticket: Ticket, record: RequestRecord, watcher: DisconnectWatcher, builder: ResponseBuilder, headers: dict[str, str]
) -> Response:
    try:
        async for item in ticket:
            record.chunk(item)
    except Exception as exc:
        err = from_exception(exc)
        record.done(err.status, disconnected=watcher.disconnected)
        return err.response(headers)
    finally:
        watcher.stop()
    if watcher.disconnected:
        record.done(CLIENT_CLOSED, disconnected=True)
        return Response(status_code=CLIENT_CLOSED)
    record.done(200)
    body = builder.full("".join(record.text), record.finish_reason, record.prompt_tokens, record.completion_tokens)
    return JSONResponse(body, headers=headers)


def _stream_response(
    ticket: Ticket, first: GenerationChunk | None, record: RequestRecord, watcher: DisconnectWatcher,
    builder: ResponseBuilder, headers: dict[str, str], include_usage: bool,
) -> SSEResponse:
    outcome: dict[str, int] = {}  # the status of an in-stream error, for the metrics

    async def close() -> None:
        ticket.cancel()  # no-op when the generation already ended
        watcher.stop()
        record.done(outcome.get("status", 200), disconnected=watcher.disconnected)

    return SSEResponse(_stream_frames(ticket, first, record, builder, include_usage, outcome), headers, on_close=close)


def _content_frame(builder: ResponseBuilder, chunk: GenerationChunk | None) -> bytes | None:
    if chunk is None or not (chunk.text or chunk.finish_reason is not None):
        return None  # e.g. text held back while it may be the start of a stop sequence
    return event(builder.content_chunk(chunk.text, chunk.finish_reason))


async def _stream_frames(
    ticket: Ticket, first: GenerationChunk | None, record: RequestRecord, builder: ResponseBuilder,
    include_usage: bool, status: dict[str, int],
) -> AsyncIterator[bytes]:
    role = builder.role_chunk()
    if role is not None:
        yield event(role)
    if (frame := _content_frame(builder, first)) is not None:
        yield frame
    try:
        async for chunk in ticket:
            record.chunk(chunk)
            if (frame := _content_frame(builder, chunk)) is not None:
                yield frame
        if include_usage:
            yield event(builder.usage_chunk(record.prompt_tokens, record.completion_tokens))
    except Exception as exc:  # mid-stream failure: an in-stream error event, then [DONE]
        err = from_exception(exc)
        status["status"] = err.status
        yield event(err.body())
    yield DONE
