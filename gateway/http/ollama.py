"""Ollama's native API (POST /api/chat, POST /api/generate, GET /api/tags, POST /api/show, GET /api/version,
GET /api/ps, GET /) as a thin translation onto the chat and completions pipeline: the body becomes an OpenAI chat
or completions request (same validation, engines, router, limits, auth and metrics), Ollama's `options`
become the sampling fields, and the reply is shaped as Ollama's: one JSON object, or (the default) a stream
of newline-delimited JSON objects, the last with `done: true` and the counts."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from contracts.chat import ToolCall
from contracts.engine import GenerationChunk
from contracts.errors import InvalidRequestError

from .errors import APIError, bad_request
from .generate import Admitted, Endpoint, check_model, forced_engine, generate, parse, read_json_object
from .ollama_errors import error_response
from .ollama_options import option_fields
from .ollama_schemas import (
    OllamaChatRequest,
    OllamaGenerateRequest,
    OllamaMessage,
    OllamaModel,
    OllamaModelDetails,
    OllamaRequest,
    OllamaRunning,
    OllamaRunningModel,
    OllamaShow,
    OllamaShowRequest,
    OllamaTags,
    OllamaVersion,
)
from .record import ChoiceReply, RequestRecord
from .request_spec import chat_spec, completion_spec, header_priority
from .schemas import ChatCompletionRequest, ChatTool, CompletionRequest
from .sse import StreamFormat
from .state import GatewayState

# the Ollama release whose API this follows (clients read /api/version to tell what a server speaks)
OLLAMA_VERSION = "0.12.0"
# what Ollama's server answers on GET / (clients match the text)
OLLAMA_RUNNING = "Ollama is running"
# NDJSON has no comment line to keep an idle stream open with
NDJSON_LINES = StreamFormat("application/x-ndjson", keeps_alive=False)

def served_model(name: str | None, state: GatewayState) -> str | None:
    """The model asked for, with Ollama's default tag read as the name itself (`name:latest`)."""
    if name and name not in state.model_names and name.endswith(":latest") and name[:-7] in state.model_names:
        name = name[:-7]
    check_model(name, state)
    return name


def _sampling(req: OllamaRequest) -> dict[str, Any]:
    """The OpenAI sampling fields Ollama's `options` (and `format`, `think`) stand for."""
    body: dict[str, Any] = option_fields(req.options) if req.options is not None else {}
    if req.format == "json":
        body["response_format"] = {"type": "json_object"}
    elif isinstance(req.format, dict):
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": req.format}}
    if isinstance(req.think, bool):
        body["chat_template_kwargs"] = {"enable_thinking": req.think}
    elif req.think is not None:
        body["reasoning_effort"] = req.think
    if req.engine is not None:
        body["engine"] = req.engine
    return body


def _tools(tools: list[ChatTool]) -> list[dict[str, Any]]:
    return [tool.model_dump(mode="json", by_alias=True, exclude_unset=True) for tool in tools]


def _arguments(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _chat_messages(messages: list[OllamaMessage]) -> list[dict[str, Any]]:
    """Ollama's messages as OpenAI's: an assistant's tool calls get ids, and each tool result the id of the
    call it answers (by `tool_name` where given, else the next one unanswered), as the chat template reads them."""
    out: list[dict[str, Any]] = []
    waiting: list[tuple[str, str]] = []   # (id, name) of the last assistant turn's calls not yet answered
    for number, message in enumerate(messages):
        if message.role == "tool":
            match = next((c for c in waiting if message.tool_name in (None, c[1])), None)
            call_id = message.tool_call_id or (match[0] if match else f"call_{number}")
            if match is not None:
                waiting.remove(match)
            out.append({"role": "tool", "tool_call_id": call_id, "content": message.content or ""})
            continue
        turn: dict[str, Any] = {"role": message.role, "content": message.content or ""}
        if message.role == "assistant":
            if message.thinking:
                turn["reasoning_content"] = message.thinking
            if message.tool_calls:
                calls = [{"id": call.id or f"call_{number}_{i}", "type": "function",
                          "function": {"name": call.function.name, "arguments": _arguments(call.function.arguments)}}
                         for i, call in enumerate(message.tool_calls)]
                turn["tool_calls"] = calls
                waiting = [(c["id"], c["function"]["name"]) for c in calls]
        out.append(turn)
    return out


def _created_at() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _tool_calls(calls: list[ToolCall]) -> list[dict[str, Any]]:
    out = []
    for index, call in enumerate(calls):
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError:
            arguments = call.arguments   # cut off by num_predict: the text so far
        out.append({"id": call.id, "function": {"index": index, "name": call.name, "arguments": arguments}})
    return out


def _line(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


@dataclass
class OllamaRenderer:
    """/api/chat (`chat`: a `message`) or /api/generate (a `response`) bodies and NDJSON stream lines."""

    model: str
    chat: bool
    id: str = field(default_factory=lambda: "ollama-" + uuid.uuid4().hex)
    stream_format: ClassVar[StreamFormat] = NDJSON_LINES

    def _reply(self, content: str, thinking: str, calls: list[ToolCall]) -> dict[str, Any]:
        if not self.chat:
            return {"response": content, **({"thinking": thinking} if thinking else {})}
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if thinking:
            message["thinking"] = thinking
        if calls:
            message["tool_calls"] = _tool_calls(calls)
        return {"message": message}

    def _done(self, record: RequestRecord, choice: ChoiceReply) -> dict[str, Any]:
        total = time.perf_counter() - record.started
        first = record.first_token_s if record.first_token_s is not None else total
        return {"done": True, "done_reason": "length" if choice.finish_reason == "length" else "stop",
                "total_duration": int(total * 1e9), "load_duration": 0,
                "prompt_eval_count": record.prompt_tokens, "prompt_eval_duration": int(first * 1e9),
                "eval_count": record.completion_tokens, "eval_duration": int(max(total - first, 0.0) * 1e9)}

    def full(self, record: RequestRecord) -> dict[str, Any]:
        choice = record.choices[0] if record.choices else ChoiceReply(0)
        return {"model": self.model, "created_at": _created_at(),
                **self._reply(choice.content, choice.reasoning_text, choice.tool_calls), **self._done(record, choice)}

    def opening(self, record: RequestRecord) -> list[bytes]:
        return []

    def choice_started(self, choice: ChoiceReply) -> list[bytes]:
        return []

    def chunk(self, choice: ChoiceReply, chunk: GenerationChunk) -> list[bytes]:
        if not (chunk.text or chunk.reasoning or chunk.tool_calls):
            return []
        return [_line({"model": self.model, "created_at": _created_at(),
                       **self._reply(chunk.text, chunk.reasoning, list(chunk.tool_calls)), "done": False})]

    def closing(self, record: RequestRecord, include_usage: bool) -> list[bytes]:
        choice = record.choices[-1] if record.choices else ChoiceReply(0)
        return [_line({"model": self.model, "created_at": _created_at(), **self._reply("", "", []),
                       **self._done(record, choice)})]

    def stream_error(self, err: APIError) -> list[bytes]:
        return [_line({"error": err.message})]

    def error_response(self, err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
        return error_response(err, headers)


def _translate_chat(data: dict[str, Any], request: Request, state: GatewayState) -> Admitted:
    req = parse(OllamaChatRequest, data)
    model = served_model(req.model, state)
    body = {"model": model, "messages": _chat_messages(req.messages or []), **_sampling(req)}
    if req.tools:
        body["tools"] = _tools(req.tools)
    chat = parse(ChatCompletionRequest, body)
    spec = chat_spec(chat, forced_engine(chat.engine, request, state), state.config)
    return Admitted(spec, req.stream is not False, False, OllamaRenderer(model=req.model or state.backend.model_id,
                                                                         chat=True))


def _translate_generate(data: dict[str, Any], request: Request, state: GatewayState) -> Admitted:
    req = parse(OllamaGenerateRequest, data)
    model = served_model(req.model, state)
    sampling = _sampling(req)
    if req.raw or req.suffix:
        if "response_format" in sampling or "chat_template_kwargs" in sampling or "reasoning_effort" in sampling:
            raise bad_request("format and think need the chat template (raw false, no suffix).", param="format",
                              code="conflicting_constraints")
        body = {"model": model, "prompt": req.prompt or "", **sampling}
        if req.suffix:
            body["suffix"] = req.suffix
        completion = parse(CompletionRequest, body)
        spec = completion_spec(completion, forced_engine(completion.engine, request, state), state.config)
    else:
        messages = ([{"role": "system", "content": req.system}] if req.system else []) + \
            [{"role": "user", "content": req.prompt or ""}]
        chat = parse(ChatCompletionRequest, {"model": model, "messages": messages, **sampling})
        spec = chat_spec(chat, forced_engine(chat.engine, request, state), state.config)
    return Admitted(spec, req.stream is not False, False, OllamaRenderer(model=req.model or state.backend.model_id,
                                                                         chat=False))


CHAT = Endpoint("ollama", _translate_chat, error_response)
GENERATE = Endpoint("ollama", _translate_generate, error_response)


async def _run(request: Request, endpoint: Endpoint, empty: Callable[[dict[str, Any]], bool], chat: bool) -> Response:
    """Ollama's load / unload call (an empty prompt or conversation: the model is loaded, or unloaded with
    keep_alive 0) is answered at once (the one model stays loaded); anything else runs the pipeline."""
    state: GatewayState = request.app.state.gateway
    try:
        with request.app.state.body_budget.slot():
            body = await read_json_object(request, state.config.max_body_bytes, state.config.body_read_timeout_seconds)
        if empty(body):
            # checked as the same request with something to answer would be (its fields, options, tools, format,
            # engine, priority and limits), though nothing runs
            stand_in = {**body, "messages": [{"role": "user", "content": "."}]} if chat else {**body, "prompt": "."}
            admitted = await run_in_threadpool(endpoint.translate, stand_in, request, state)
            header_priority(request.headers.get("x-switchyard-priority"))
            name = admitted.renderer.model
            state.metrics.count_request("ollama", None, None, 200)
            reply = {"message": {"role": "assistant", "content": ""}} if chat else {"response": ""}
            return JSONResponse({"model": name, "created_at": _created_at(), **reply,
                                 "done": True, "done_reason": "unload" if body.get("keep_alive") == 0 else "load"})
    except APIError as err:
        state.metrics.count_request("ollama", None, None, err.status)
        return error_response(err)
    return await generate(request, endpoint, body)


async def chat(request: Request) -> Response:
    """POST /api/chat."""
    return await _run(request, CHAT, lambda body: body.get("messages") in (None, []), chat=True)


async def generate_text(request: Request) -> Response:
    """POST /api/generate."""
    return await _run(request, GENERATE, lambda body: body.get("prompt") in (None, "") and body.get("suffix") in (None, ""),
                      chat=False)


def _details(state: GatewayState) -> OllamaModelDetails:
    return OllamaModelDetails(parent_model="", format="mlx", family=state.backend.model_id, parameter_size="",
                              quantization_level="")


def _modified_at(state: GatewayState) -> str:
    return datetime.fromtimestamp(state.created, tz=UTC).isoformat().replace("+00:00", "Z")


def _digest(name: str) -> str:
    return uuid.uuid5(uuid.NAMESPACE_URL, name).hex


def _reply(body: BaseModel) -> JSONResponse:
    return JSONResponse(body.model_dump(mode="json"))


async def tags(request: Request) -> Response:
    """GET /api/tags: the one model (and its aliases), as Ollama lists local models."""
    state: GatewayState = request.app.state.gateway
    state.metrics.count_request("models", None, None, 200)
    return _reply(OllamaTags(models=[
        OllamaModel(name=name, model=name, modified_at=_modified_at(state), size=0, digest=_digest(name),
                    details=_details(state))
        for name in dict.fromkeys((state.backend.model_id, *state.config.model_aliases))]))


async def running(request: Request) -> Response:
    """GET /api/ps: the loaded model (always the one model, loaded for as long as the server runs)."""
    state: GatewayState = request.app.state.gateway
    state.metrics.count_request("models", None, None, 200)
    name = state.backend.model_id
    return _reply(OllamaRunning(models=[OllamaRunningModel(
        name=name, model=name, size=0, digest=_digest(name), details=_details(state),
        expires_at="9999-12-31T23:59:59Z", size_vram=0, context_length=state.backend.context_length)]))


def _thinks(state: GatewayState) -> bool:
    """The chat template opens a thinking block when asked to think (rendered, not run: no MLX)."""
    try:
        prompt = state.backend.chat_prompt([{"role": "user", "content": "Hi"}], template_kwargs={"enable_thinking": True})
    except InvalidRequestError:
        return False
    return prompt.reply.opens_in_reasoning


async def show(request: Request) -> Response:
    """POST /api/show {"model"}: the model's details, context length and capabilities."""
    state: GatewayState = request.app.state.gateway
    try:
        body = await read_json_object(request, state.config.max_body_bytes, state.config.body_read_timeout_seconds)
        asked = parse(OllamaShowRequest, body)
        for name in (asked.model, asked.name):   # each, where given, names the served model
            if name is not None:
                served_model(name, state)
    except APIError as err:
        state.metrics.count_request("models", None, None, err.status)
        return error_response(err)
    state.metrics.count_request("models", None, None, 200)
    # Ollama's capability names: "insert" is fill-in-the-middle (/api/generate's suffix); "thinking", which its
    # clients check before they send `think`, where the chat template opens a thinking block
    capabilities = ["completion", "tools", *(["thinking"] if await run_in_threadpool(_thinks, state) else []),
                    *(["insert"] if state.backend.fills_in_middle else [])]
    return _reply(OllamaShow(modelfile="", parameters="", template="", details=_details(state),
                             model_info={"general.architecture": "switchyard",
                                         "switchyard.context_length": state.backend.context_length},
                             capabilities=capabilities, modified_at=_modified_at(state)))


async def root(request: Request) -> Response:
    """GET / (and HEAD /): Ollama's liveness answer, which clients that speak Ollama probe before anything else
    (open, as /health is: it says nothing about the model)."""
    request.app.state.gateway.metrics.count_request("health", None, None, 200)
    return PlainTextResponse(OLLAMA_RUNNING)


async def version(request: Request) -> Response:
    """GET /api/version: the Ollama API version this follows."""
    return _reply(OllamaVersion(version=OLLAMA_VERSION))
