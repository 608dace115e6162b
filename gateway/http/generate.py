"""The generation endpoints' one flow: read and validate the body, translate it into a RequestSpec,
queue it, then answer as JSON or as a stream — shaped by the endpoint's Renderer (OpenAI chat and
completions, Anthropic messages, OpenAI responses all run this same pipeline)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contracts.engine import GenerationChunk
from contracts.errors import InvalidRequestError
from contracts.names import forces_tool_call
from gateway.routing.interface import RouteDecision
from gateway.worker.errors import QueueFull, WorkerError, WorkerUnavailable
from gateway.worker.pipeline import ChoiceStart, check_prompt, run_request
from gateway.worker.scheduler import Ticket
from gateway.worker.spec import RequestSpec

from .auth import KEY_ID
from .disconnect import DisconnectWatcher
from .errors import APIError, bad_request, from_exception, from_validation_error
from .openai_render import OpenAIRenderer
from .record import CLIENT_CLOSED, RequestRecord
from .render import Renderer
from .request_spec import chat_spec, completion_spec, header_priority, resolve_engine
from .schemas import ChatCompletionRequest, CompletionRequest
from .sse import KEEPALIVE, SSEResponse
from .state import GatewayState


def route_headers(decision: RouteDecision) -> dict[str, str]:
    return {
        "X-Switchyard-Engine": decision.engine,
        "X-Switchyard-Class": decision.klass,
        "X-Switchyard-Route-Reason": decision.reason,
    }


async def read_json_object(request: Request, max_bytes: int, timeout: float | None = None) -> dict[str, Any]:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media and media != "application/json" and not media.endswith("+json"):
        raise APIError(415, f"Content-Type must be application/json, not {media!r}.", code="unsupported_media_type")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise APIError(413, f"Request body is larger than {max_bytes} bytes.", code="request_too_large")
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for part in request.stream():
                body += part
                if len(body) > max_bytes:
                    raise APIError(413, f"Request body is larger than {max_bytes} bytes.", code="request_too_large")
    except TimeoutError:
        raise APIError(408, f"The request body did not arrive within {timeout:g} s.", code="body_timeout",
                       headers={"Connection": "close"}) from None
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: absurdly deep nesting
        raise bad_request("We could not parse the JSON body of your request.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request("The request body must be a JSON object.", code="invalid_json")
    bad = _lone_surrogate(data)
    if bad is not None:
        where = f" in '{bad}'" if bad else ""
        raise bad_request(f"The JSON body holds a lone UTF-16 surrogate{where} (e.g. \\ud83d without its pair): "
                          "not valid Unicode text.", param=bad or None, code="invalid_json")
    return data


def _unicode(text: str) -> bool:
    """False for a string holding a lone surrogate (not encodable as UTF-8)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _lone_surrogate(data: Any) -> str | None:
    """The dotted path of the first string (or key) holding a lone surrogate, else None. JSON escapes
    (`"\\ud83d"`, a UTF-16 string cut in half) parse into Python strings that no tokenizer can encode."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if not _unicode(value):
                return path
        elif isinstance(value, dict):
            for key, item in reversed(value.items()):
                if not _unicode(key):
                    return path
                stack.append((item, f"{path}.{key}" if path else str(key)))
        elif isinstance(value, list):
            stack.extend((item, f"{path}.{i}" if path else str(i)) for i, item in reversed(list(enumerate(value))))
    return None


def parse(model: type[BaseModel], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


async def count_prompt_tokens(request: Request, endpoint: str,
                              spec_of: Callable[[dict[str, Any], GatewayState], RequestSpec],
                              error_response: Callable[[APIError], Response],
                              body_of: Callable[[int], dict[str, Any]]) -> Response:
    """A token-counting endpoint (Anthropic's count_tokens, OpenAI's responses/input_tokens): the prompt
    `spec_of` builds from the body, through the model's own chat template, tools included; nothing is
    generated or queued. Errors in the endpoint's own shape."""
    state: GatewayState = request.app.state.gateway
    try:
        with request.app.state.body_budget.slot():
            data = await read_json_object(request, state.config.max_body_bytes, state.config.body_read_timeout_seconds)
        spec = spec_of(data, state)
        # chat_prompt is the tokenizer and the template, no MLX: safe off the model's worker thread
        prompt = await run_in_threadpool(state.backend.chat_prompt, spec.messages, spec.tools, spec.tool_choice,
                                         spec.template_kwargs, spec.continue_final)
    except Exception as exc:  # noqa: BLE001 - every failure is an error object of the endpoint's API
        err = from_exception(exc)
        state.metrics.count_request(endpoint, None, None, err.status)
        return error_response(err)
    state.metrics.count_request(endpoint, None, None, 200)
    return JSONResponse(body_of(len(prompt.ids)))


def check_model(model: str | None, state: GatewayState) -> None:
    if model is not None and model not in state.model_names:
        raise APIError(
            404, f"The model {model!r} does not exist; this server serves {state.backend.model_id!r}.",
            param="model", code="model_not_found",
        )


def forced_engine(body_engine: str | None, request: Request, state: GatewayState) -> str | None:
    return resolve_engine(body_engine, request.headers.get("x-switchyard-engine"), tuple(state.backend.engine_names))


@dataclass
class Admitted:
    """A validated request: what to run and how to answer."""

    spec: RequestSpec
    stream: bool
    include_usage: bool
    renderer: Renderer


@dataclass(frozen=True)
class Endpoint:
    name: str                                                          # the metrics' endpoint label
    translate: Callable[[dict[str, Any], Request, GatewayState], Admitted]  # raises APIError
    error_response: Callable[[APIError], Response]                     # errors before a renderer exists
    # the headers that carry the response's id (the anthropic SDK reads `request-id`)
    id_headers: tuple[str, ...] = ("X-Request-Id",)


def _openai_chat(data: dict[str, Any], request: Request, state: GatewayState) -> Admitted:
    req = parse(ChatCompletionRequest, data)
    check_model(req.model, state)
    spec = chat_spec(req, forced_engine(req.engine, request, state), state.config)
    renderer = OpenAIRenderer(chat=True, model=state.backend.model_id, logprobs=spec.params.logprobs,
                              call_only=bool(spec.tools) and forces_tool_call(spec.tool_choice),
                              custom_tools=req.custom_tool_names(),
                              include_reasoning=req.include_reasoning is not False,
                              prompt_logprobs=req.prompt_logprobs,
                              continuous_usage=bool(req.stream_options and req.stream_options.continuous()))
    return Admitted(spec, req.stream, bool(req.stream_options and req.stream_options.include_usage), renderer)


def _openai_completion(data: dict[str, Any], request: Request, state: GatewayState) -> Admitted:
    req = parse(CompletionRequest, data)
    check_model(req.model, state)
    spec = completion_spec(req, forced_engine(req.engine, request, state), state.config)
    renderer = OpenAIRenderer(chat=False, model=state.backend.model_id, logprobs=req.logprobs is not None,
                              n=req.n or 1, best_of=spec.n, echo=_echoed(spec, state) if req.echo else (),
                              top_logprobs=req.logprobs or 0, prompt_logprobs=req.prompt_logprobs,
                              continuous_usage=bool(req.stream_options and req.stream_options.continuous()))
    return Admitted(spec, req.stream, bool(req.stream_options and req.stream_options.include_usage), renderer)


def _echoed(spec: RequestSpec, state: GatewayState) -> tuple[str, ...]:
    """Each prompt's text, for `echo` (token ids decoded; an id past the vocabulary is the request's 400)."""
    try:
        return tuple(state.backend.prompt_text(prompt) for prompt in spec.prompts)
    except InvalidRequestError as exc:
        raise from_exception(exc) from None


CHAT = Endpoint("chat_completions", _openai_chat, lambda err: err.response())
COMPLETIONS = Endpoint("completions", _openai_completion, lambda err: err.response())


async def chat_completions(request: Request) -> Response:
    return await generate(request, CHAT)


async def completions(request: Request) -> Response:
    return await generate(request, COMPLETIONS)


async def _admit(request: Request, state: GatewayState, endpoint: Endpoint,
                 data: dict[str, Any] | None) -> tuple[Admitted, Ticket]:
    """Read (unless the caller already has: `data`), validate and queue the request (raises APIError
    400/404/413/415, QueueFull, WorkerUnavailable)."""
    if state.scheduler.full:  # no point reading a body that cannot be queued
        raise QueueFull(state.config.retry_after_seconds)
    if data is None:
        with request.app.state.body_budget.slot():
            data = await read_json_object(request, state.config.max_body_bytes, state.config.body_read_timeout_seconds)
    # off the event loop: validation compiles response_format schemas (llguidance takes about 1 s per MiB
    # of regex alternatives), which would otherwise stall every other client's stream meanwhile
    admitted = await run_in_threadpool(endpoint.translate, data, request, state)
    if state.config.api_keys and not state.config.share_prefix_cache:   # tenants never share cached prompts
        admitted.spec = replace(admitted.spec, cache_scope=request.scope.get(KEY_ID, "anonymous"))
    header = header_priority(request.headers.get("x-switchyard-priority"))
    if header is not None and "priority" not in data:   # the body's field wins, as for `engine`
        admitted.spec = replace(admitted.spec, priority=header)
    spec, backend, router = admitted.spec, state.backend, state.router
    ticket = state.scheduler.submit(lambda t: run_request(backend, router, spec, t.cancel_token, t.admitted_depth,
                                                                        concurrent=t.concurrent), priority=spec.priority)
    return admitted, ticket


@dataclass
class _Started:
    """What came before any output: the route's headers and the first items, or the error that ended the
    request there; `gone`: the client went away first."""

    headers: dict[str, str]
    early: list[ChoiceStart | GenerationChunk]
    error: APIError | None = None
    gone: bool = False


async def _start(ticket: Ticket, record: RequestRecord, watcher: DisconnectWatcher,
                 route: asyncio.Future[dict[str, str]]) -> _Started:
    """Wait for the route (its headers go to `route`) and the first chunk, so errors raised before any
    output (prompt too long, engine unavailable, a failing prefill) are plain HTTP errors, for streams too
    (unless a stream had to start before its first token: _stream_frames)."""
    headers: dict[str, str] = {}
    early: list[ChoiceStart | GenerationChunk] = []
    try:
        routed = await ticket.next()
        record.routed(routed)
        headers = route_headers(routed.decision)
        route.set_result(headers)
        while not early or isinstance(early[-1], ChoiceStart):
            early.append(await ticket.next())
        record.prefilled(early)
    except StopAsyncIteration:
        pass  # cancelled (client gone, server stopping) or nothing generated
    except Exception as exc:
        watcher.stop()
        err = from_exception(exc)
        record.done(err.status, disconnected=watcher.disconnected)
        return _Started(headers, early, error=err)
    if watcher.disconnected:
        watcher.stop()
        record.done(CLIENT_CLOSED, disconnected=True)
        return _Started(headers, early, gone=True)
    if record.decision is None:  # dropped from the queue without a disconnect: the server is stopping
        watcher.stop()
        err = from_exception(WorkerUnavailable("The server is shutting down."))
        record.done(err.status)
        return _Started(headers, early, error=err)
    return _Started(headers, early)


async def generate(request: Request, endpoint: Endpoint, data: dict[str, Any] | None = None) -> Response:
    """One generation request through `endpoint`; `data`: its JSON body where the caller has read it already."""
    state: GatewayState = request.app.state.gateway
    record = RequestRecord(state, endpoint.name)
    try:
        admitted, ticket = await _admit(request, state, endpoint, data)
    except (APIError, WorkerError) as exc:
        err = from_exception(exc)
        record.done(err.status)
        return endpoint.error_response(err)
    watcher = DisconnectWatcher(request.receive, ticket.cancel)
    renderer = admitted.renderer
    route: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
    start = asyncio.ensure_future(_start(ticket, record, watcher, route))
    ids = dict.fromkeys(endpoint.id_headers, renderer.id)
    # a stream format with no comment line (Ollama's NDJSON) cannot be kept alive: it starts with its first token
    keepalive = state.config.stream_keepalive_seconds if renderer.stream_format.keeps_alive else None
    if admitted.stream:
        early = await _early_stream(state, admitted, ticket, start, route, record, watcher, ids, keepalive)
        if early is not None:
            return early
    started = await start
    if started.gone:
        return Response(status_code=CLIENT_CLOSED)
    if started.error is not None:
        return renderer.error_response(started.error, started.headers)
    headers = {**started.headers, **ids}
    if admitted.stream:
        return _stream_response(ticket, start, record, watcher, renderer, headers, admitted.include_usage, keepalive)
    return await _json_response(ticket, started.early, record, watcher, renderer, headers)


async def _early_stream(
    state: GatewayState, admitted: Admitted, ticket: Ticket, start: asyncio.Future[_Started],
    route: asyncio.Future[dict[str, str]], record: RequestRecord, watcher: DisconnectWatcher,
    ids: dict[str, str], keepalive: float | None,
) -> Response | None:
    """A stream that has no first token after `keepalive` seconds starts before it, so that clients and
    proxies with an idle timeout keep it: routed (a long prefill), with the route's headers; still queued
    (every running slot taken), without them — the route is then reported in the stream, as an SSE comment
    (route_comment), once known. A queued stream's prompt is checked first (check_prompt), so a prompt too
    long or a template error is still a plain HTTP error. None: no early start (the first item came, or an
    error before it)."""
    renderer = admitted.renderer
    if not (await asyncio.wait({start, route}, timeout=keepalive, return_when=asyncio.FIRST_COMPLETED))[0]:
        try:
            await run_in_threadpool(check_prompt, state.backend, admitted.spec)
        except Exception as exc:  # noqa: BLE001 - the worker would fail it the same way: answer now
            ticket.cancel()
            start.cancel()
            watcher.stop()
            err = from_exception(exc)
            record.done(err.status, disconnected=watcher.disconnected)
            return renderer.error_response(err)
        if not start.done() and not route.done():
            return _stream_response(ticket, start, record, watcher, renderer, ids, admitted.include_usage,
                                    keepalive, route=route)
    elif not start.done():   # routed within keepalive: it waits as long again for its first token
        await asyncio.wait({start}, timeout=keepalive)
    if start.done():
        return None
    # routed, no first token yet (a long prefill): the stream starts, with its route's headers
    return _stream_response(ticket, start, record, watcher, renderer, {**route.result(), **ids},
                            admitted.include_usage, keepalive)


def route_comment(headers: dict[str, str]) -> bytes:
    """The route's headers as one SSE comment (every client's parser skips it), for a stream whose headers
    went out while it was still queued, before its route was chosen."""
    return b"".join(f": {name}: {value}\n".encode() for name, value in headers.items()) + b"\n"


async def _json_response(
    ticket: Ticket, early: list[ChoiceStart | GenerationChunk], record: RequestRecord, watcher: DisconnectWatcher,
    renderer: Renderer, headers: dict[str, str],
) -> Response:
    for item in early:
        record.take(item)
    try:
        async for item in ticket:
            record.take(item)
    except Exception as exc:
        err = from_exception(exc)
        record.done(err.status, disconnected=watcher.disconnected)
        return renderer.error_response(err, headers)
    finally:
        watcher.stop()
    if watcher.disconnected:
        record.done(CLIENT_CLOSED, disconnected=True)
        return Response(status_code=CLIENT_CLOSED)
    record.done(200)
    return JSONResponse(renderer.full(record), headers=headers)


def _stream_response(
    ticket: Ticket, start: asyncio.Future[_Started], record: RequestRecord, watcher: DisconnectWatcher,
    renderer: Renderer, headers: dict[str, str], include_usage: bool, keepalive: float | None,
    route: asyncio.Future[dict[str, str]] | None = None,
) -> SSEResponse:
    """`route`: the route is not in `headers` (the stream started while queued) and goes in the stream."""
    outcome: dict[str, int] = {}  # the status of an in-stream error, for the metrics

    async def close() -> None:
        start.cancel()   # no-op once the first token came
        ticket.cancel()  # no-op when the generation already ended
        watcher.stop()
        record.done(outcome.get("status", 200), disconnected=watcher.disconnected)

    frames = _stream_frames(ticket, start, record, renderer, include_usage, outcome, keepalive, route)
    return SSEResponse(frames, headers, on_close=close, stream_format=renderer.stream_format)


def _frames(renderer: Renderer, record: RequestRecord, item: ChoiceStart | GenerationChunk) -> list[bytes]:
    choice = record.take(item)
    if isinstance(item, ChoiceStart):
        return renderer.choice_started(choice)
    return renderer.chunk(choice, item)


_IDLE = object()


async def _items_or_idle(ticket: Ticket, seconds: float | None) -> AsyncIterator[Any]:
    """The ticket's items, with _IDLE after every `seconds` without one (None: items only): a step longer
    than that (a long prompt's prefill piece) still lets the stream send its keep-alive."""
    if seconds is None:
        async for item in ticket:
            yield item
        return
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(ticket.next())
            done, _ = await asyncio.wait({pending}, timeout=seconds)
            if not done:
                yield _IDLE
                continue
            fetched, pending = pending, None
            try:
                item = fetched.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:   # the stream ended early (a client gone): stop waiting
            pending.cancel()


async def _stream_frames(
    ticket: Ticket, start: asyncio.Future[_Started], record: RequestRecord, renderer: Renderer,
    include_usage: bool, status: dict[str, int], keepalive: float | None,
    route: asyncio.Future[dict[str, str]] | None = None,
) -> AsyncIterator[bytes]:
    if not start.done():   # started before its first token: comments keep the connection alive
        yield KEEPALIVE
    while not start.done():
        await asyncio.wait({start} if route is None else {start, route}, timeout=keepalive,
                           return_when=asyncio.FIRST_COMPLETED)
        if route is not None and route.done():
            yield route_comment(route.result())
            route = None
        elif not start.done():
            yield KEEPALIVE
    if route is not None and route.done():   # routed and started at once
        yield route_comment(route.result())
    started = await start
    if started.gone:
        return
    if started.error is not None:   # an error before any output, once the stream had started
        status["status"] = started.error.status
        for frame in renderer.stream_error(started.error):
            yield frame
        return
    for frame in renderer.opening(record):
        yield frame
    try:
        for item in started.early:
            for frame in _frames(renderer, record, item):
                yield frame
        loop = asyncio.get_running_loop()
        sent = loop.time()
        async for item in _items_or_idle(ticket, keepalive):
            frames = [] if item is _IDLE else _frames(renderer, record, item)
            if frames:
                sent = loop.time()
            elif keepalive is not None and loop.time() - sent >= keepalive:
                # nothing sent for `keepalive` seconds (a call's long object value goes out once whole): keep it open
                frames, sent = [renderer.stream_format.idle], loop.time()
            for frame in frames:
                yield frame
        frames = renderer.closing(record, include_usage)
    except Exception as exc:  # mid-stream failure: an in-stream error event, then the end marker
        err = from_exception(exc)
        status["status"] = err.status
        frames = renderer.stream_error(err)
    for frame in frames:
        yield frame
