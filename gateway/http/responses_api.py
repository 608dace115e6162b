"""POST /v1/responses: the OpenAI Responses API as a thin translation onto the chat pipeline.
`input` items become chat messages (function and custom tool calls and their outputs included); the
reply comes back as reasoning, message, function_call and custom_tool_call output items (a custom tool
is a function of one string to the model), or as the Responses stream events
(response.created … response.output_text.delta … response.completed)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contracts.chat import CallDelta, TokenLogprob, ToolCall
from contracts.engine import GenerationChunk
from gateway.worker.spec import RequestSpec

from .errors import APIError, bad_request
from .generate import Admitted, Endpoint, check_model, count_prompt_tokens, forced_engine, generate, parse
from .openai_render import chat_logprobs, custom_input
from .record import ChoiceReply, RequestRecord, answer_logprobs
from .render import around_text
from .request_spec import chat_spec
from .responses_schemas import (
    UNSUPPORTED_FIELDS,
    CustomTool,
    CustomToolCallItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputTokenCount,
    InputTokensRequest,
    MessageItem,
    NamedFunction,
    ReasoningItem,
    ResponsesAllowedTools,
    ResponsesRequest,
)
from .schemas import ChatCompletionRequest
from .sse import SSE, StreamFormat, event
from .state import GatewayState


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    if isinstance(req.input, str):
        return [*messages, {"role": "user", "content": req.input}]
    reasoning = ""
    for item in req.input:
        if isinstance(item, ReasoningItem):
            reasoning += item.text()
        elif isinstance(item, MessageItem):
            message: dict[str, Any] = {"role": item.role, "content": item.text()}
            if item.role == "assistant" and reasoning:
                message["reasoning_content"], reasoning = reasoning, ""
            messages.append(message)
        elif isinstance(item, (FunctionCallItem, CustomToolCallItem)):
            call = item.chat_call()
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and not reasoning:
                last.setdefault("tool_calls", []).append(call)   # parallel calls of one turn
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
                if reasoning:
                    messages[-1]["reasoning_content"], reasoning = reasoning, ""
        elif isinstance(item, FunctionCallOutputItem):   # a custom tool's output too
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
    return messages


LOGPROBS = "message.output_text.logprobs"


def _wants_logprobs(req: ResponsesRequest) -> bool:
    """OpenAI's switch is `include`; top_logprobs asks for alternatives, so for the logprobs too."""
    return LOGPROBS in (req.include or ()) or bool(req.top_logprobs)


def _logprobs(tokens: list[TokenLogprob]) -> list[dict[str, Any]]:
    """An output_text's logprobs, in the Responses shape (token, logprob, bytes, top_logprobs)."""
    return [entry.model_dump() for entry in chat_logprobs(tokens).content]


def _chat_named(choice: NamedFunction) -> dict[str, Any]:
    return {"type": "function", "function": {"name": choice.name}}


def to_chat_request(req: ResponsesRequest) -> dict[str, Any]:
    for name in ("previous_response_id", "conversation"):
        if getattr(req, name) is not None:
            raise bad_request(f"{name} is not supported: this server stores no responses or conversations; "
                              "send the whole conversation in `input` (store: false).", param=name,
                              code="unsupported_parameter")
    if req.truncation == "auto":
        # dropping items silently would change what the agent believes the model saw
        raise bad_request("truncation 'auto' is not supported: no input item is ever dropped; a conversation "
                          "that outgrows the context is a 400 with code context_length_exceeded (compact it "
                          "and resend).", param="truncation", code="unsupported_value")
    for name, why in UNSUPPORTED_FIELDS.items():
        if getattr(req, name) is not None:
            raise bad_request(f"{name} is not supported: {why}.", param=name, code="unsupported_parameter")
    if req.background:
        raise bad_request("background responses are not supported.", param="background",
                          code="unsupported_parameter")
    body: dict[str, Any] = {"model": req.model, "messages": _messages(req), "stream": req.stream,
                            "engine": req.engine}
    if not any(m["role"] != "system" for m in body["messages"]):
        raise bad_request("input holds no message to answer.", param="input", code="empty_conversation")
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "parallel_tool_calls"):
        if getattr(req, name) is not None:
            body[name] = getattr(req, name)
    if req.max_output_tokens is not None:
        body["max_tokens"] = req.max_output_tokens
    if _wants_logprobs(req):
        body["logprobs"], body["top_logprobs"] = True, req.top_logprobs or 0
    if req.tools:
        body["tools"] = [{"type": "function", "function": t.function()} for t in req.tools]
    if isinstance(req.tool_choice, NamedFunction):
        body["tool_choice"] = _chat_named(req.tool_choice)
    elif isinstance(req.tool_choice, ResponsesAllowedTools):
        body["tool_choice"] = {"type": "allowed_tools", "allowed_tools": {
            "mode": req.tool_choice.mode, "tools": [_chat_named(t) for t in req.tool_choice.tools]}}
    elif req.tool_choice is not None and (req.tools or req.tool_choice in ("none", "required")):
        body["tool_choice"] = req.tool_choice   # "required" without tools: the chat pipeline's 400, as OpenAI's
    if req.text is not None and req.text.format is not None:
        body["response_format"] = req.text.format.response_format()
    if req.reasoning is not None and req.reasoning.effort is not None:
        body["reasoning_effort"] = req.reasoning.effort
    return body


ID_PREFIXES = {"reasoning": "rs", "message": "msg", "function_call": "fc", "custom_tool_call": "ctc"}


@dataclass
class _Item:
    kind: str                 # "reasoning" | "message" | "function_call" | "custom_tool_call"
    id: str
    output_index: int
    text: str = ""
    call: Any = None
    logprobs: list[TokenLogprob] = field(default_factory=list)   # a message's, of its text's tokens


@dataclass
class ResponsesRenderer:
    stream_format: ClassVar[StreamFormat] = SSE
    model: str
    request: ResponsesRequest
    id: str = field(default_factory=lambda: _new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))
    _sequence: int = 0
    _items: list[_Item] = field(default_factory=list)
    _open: _Item | None = None
    _logprobs: list[TokenLogprob] = field(default_factory=list)   # answer tokens' not yet sent with text

    # ---- bodies ----
    def _response(self, status: str, output: list[dict[str, Any]], record: RequestRecord | None) -> dict[str, Any]:
        req = self.request
        body: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "model": self.model, "output": output, "error": None, "incomplete_details": None,
            "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "temperature": req.temperature, "top_p": req.top_p,
            "tool_choice": (req.tool_choice.model_dump() if isinstance(req.tool_choice, BaseModel)
                            else req.tool_choice or "auto"),
            "tools": [t.model_dump(exclude_none=True, by_alias=True) for t in req.tools or []],
            "store": False, "metadata": req.metadata or {}, "usage": None, "max_tool_calls": req.max_tool_calls,
            "reasoning": {"effort": req.reasoning.effort if req.reasoning else None,
                          "summary": (req.reasoning.summary or req.reasoning.generate_summary) if req.reasoning else None},
        }
        if record is not None:
            body["usage"] = {"input_tokens": record.prompt_tokens,
                             "input_tokens_details": {"cached_tokens": record.cached_tokens},
                             "output_tokens": record.completion_tokens,
                             "output_tokens_details": {"reasoning_tokens": record.reasoning_tokens},
                             "total_tokens": record.prompt_tokens + record.completion_tokens}
            if record.finish_reason == "length":
                body["status"] = "incomplete"
                body["incomplete_details"] = {"reason": "max_output_tokens"}
        return body

    @property
    def _summarised(self) -> bool:
        """Whether the reasoning comes back as its summary (asked for) or as reasoning_text content."""
        return self.request.reasoning is not None and self.request.reasoning.wants_summary()

    def _item_body(self, item: _Item, done: bool, status: str | None = None) -> dict[str, Any]:
        status = status or ("completed" if done else "in_progress")
        if item.kind == "reasoning":
            # one of the two, never both: clients that show summary and content alike would show it twice
            if self._summarised:
                return {"type": "reasoning", "id": item.id,
                        "summary": [{"type": "summary_text", "text": item.text}] if done else [], "status": status}
            return {"type": "reasoning", "id": item.id, "summary": [],
                    "content": [{"type": "reasoning_text", "text": item.text}] if done else [], "status": status}
        if item.kind == "message":
            content = [{"type": "output_text", "text": item.text, "annotations": [],
                        "logprobs": _logprobs(item.logprobs)}] if done else []
            return {"type": "message", "id": item.id, "role": "assistant", "status": status, "content": content}
        call = item.call
        if item.kind == "custom_tool_call":
            return {"type": "custom_tool_call", "id": item.id, "call_id": call.id, "name": call.name,
                    "input": custom_input(call.arguments) if done else "", "status": status}
        return {"type": "function_call", "id": item.id, "call_id": call.id, "name": call.name,
                "arguments": call.arguments if done else "", "status": status}

    def _call_kind(self, name: str) -> str:
        custom = any(isinstance(t, CustomTool) and t.name == name for t in self.request.tools or ())
        return "custom_tool_call" if custom else "function_call"

    def full(self, record: RequestRecord) -> dict[str, Any]:
        choice = record.choices[0] if record.choices else ChoiceReply(0)
        items: list[_Item] = []
        if choice.reasoning_text:
            items.append(_Item("reasoning", _new_id("rs"), len(items), choice.reasoning_text))
        if choice.content:
            items.append(_Item("message", _new_id("msg"), len(items), choice.content,
                               logprobs=choice.answer_logprobs))
        for call in choice.tool_calls:
            kind = self._call_kind(call.name)
            items.append(_Item(kind, _new_id(ID_PREFIXES[kind]), len(items), call=call))
        last = _last_status(record)
        return self._response("completed", [self._item_body(i, True, last if i is items[-1] else None) for i in items],
                              record)

    # ---- stream ----
    def _event(self, kind: str, **payload: Any) -> bytes:
        # numbered from 0, as OpenAI numbers a stream's events (response.created is 0)
        number, self._sequence = self._sequence, self._sequence + 1
        return event({"type": kind, "sequence_number": number, **payload}, kind)

    def opening(self, record: RequestRecord) -> list[bytes]:
        start = self._response("in_progress", [], None)
        return [self._event("response.created", response=start), self._event("response.in_progress", response=start)]

    def choice_started(self, choice: ChoiceReply) -> list[bytes]:
        return []

    def chunk(self, choice: ChoiceReply, chunk: GenerationChunk) -> list[bytes]:
        going_on, opening = around_text(chunk.call_deltas)
        frames = [frame for delta in going_on for frame in self._call_progress(delta)]
        if chunk.reasoning:
            frames += self._item("reasoning")
            item = self._open
            assert item is not None
            item.text += chunk.reasoning
            where = {"item_id": item.id, "output_index": item.output_index}
            if self._summarised:
                frames.append(self._event("response.reasoning_summary_text.delta", **where, summary_index=0,
                                          delta=chunk.reasoning))
            else:
                frames.append(self._event("response.reasoning_text.delta", **where, content_index=0,
                                          delta=chunk.reasoning))
        self._logprobs += answer_logprobs(chunk)
        if chunk.text:
            frames += self._item("message")
            item = self._open
            assert item is not None
            item.text += chunk.text
            sent, self._logprobs = self._logprobs, []
            item.logprobs += sent
            frames.append(self._event("response.output_text.delta", item_id=item.id, output_index=item.output_index,
                                      content_index=0, delta=chunk.text, logprobs=_logprobs(sent)))
        for delta in opening:
            frames += self._call_progress(delta)
        return frames

    def _call_progress(self, delta: CallDelta) -> list[bytes]:
        """A call's item opens with its name and takes its arguments as they are written: a function call's as
        JSON, a custom tool's as the text of its input (as far as the JSON's one string reads)."""
        kind = self._call_kind(delta.name)
        frames = self._item(kind, ToolCall(delta.id, delta.name, "")) if delta.opens else []
        item = self._open
        assert item is not None and item.call is not None and item.call.id == delta.id
        item.call = delta.done or ToolCall(delta.id, delta.name, item.call.arguments + delta.arguments)
        where = {"item_id": item.id, "output_index": item.output_index}
        if kind == "function_call":
            if delta.arguments:
                frames.append(self._event("response.function_call_arguments.delta", **where, delta=delta.arguments))
            return frames
        # the input so far (item.text: what was sent); arguments that are no one string (custom_input gives them
        # back as written) are not streamed, their input comes whole with the call's done events
        text = custom_input(item.call.arguments)
        if text != item.call.arguments and text.startswith(item.text) and len(text) > len(item.text):
            frames.append(self._event("response.custom_tool_call_input.delta", **where, delta=text[len(item.text):]))
            item.text = text
        return frames

    def _item(self, kind: str, call: Any = None) -> list[bytes]:
        if self._open is not None and self._open.kind == kind and call is None:
            return []
        frames = self._close()
        item = _Item(kind, _new_id(ID_PREFIXES[kind]), len(self._items), call=call)
        self._items.append(item)
        self._open = item
        frames.append(self._event("response.output_item.added", output_index=item.output_index,
                                  item=self._item_body(item, False)))
        if kind == "reasoning" and self._summarised:
            frames.append(self._event("response.reasoning_summary_part.added", item_id=item.id,
                                      output_index=item.output_index, summary_index=0,
                                      part={"type": "summary_text", "text": ""}))
        if kind == "message":
            frames.append(self._event("response.content_part.added", item_id=item.id,
                                      output_index=item.output_index, content_index=0,
                                      part={"type": "output_text", "text": "", "annotations": []}))
        return frames

    def _close(self, status: str | None = None) -> list[bytes]:
        item, self._open = self._open, None
        if item is None:
            return []
        where = {"item_id": item.id, "output_index": item.output_index}
        frames = []
        if item.kind == "reasoning" and self._summarised:
            part = {"type": "summary_text", "text": item.text}
            frames.append(self._event("response.reasoning_summary_text.done", **where, summary_index=0, text=item.text))
            frames.append(self._event("response.reasoning_summary_part.done", **where, summary_index=0, part=part))
        elif item.kind == "reasoning":
            frames.append(self._event("response.reasoning_text.done", **where, content_index=0, text=item.text))
        elif item.kind == "message":
            frames.append(self._event("response.output_text.done", **where, content_index=0, text=item.text,
                                      logprobs=_logprobs(item.logprobs)))
            frames.append(self._event("response.content_part.done", **where, content_index=0,
                                      part={"type": "output_text", "text": item.text, "annotations": [],
                                            "logprobs": _logprobs(item.logprobs)}))
        elif item.kind == "custom_tool_call":
            frames.append(self._event("response.custom_tool_call_input.done", **where,
                                      input=custom_input(item.call.arguments)))
        else:
            frames.append(self._event("response.function_call_arguments.done", **where,
                                      arguments=item.call.arguments))
        frames.append(self._event("response.output_item.done", output_index=item.output_index,
                                  item=self._item_body(item, True, status)))
        return frames

    def closing(self, record: RequestRecord, include_usage: bool) -> list[bytes]:
        last = _last_status(record)
        frames = self._close(last)
        body = self._response("completed", [self._item_body(i, True, last if i is self._items[-1] else None)
                                            for i in self._items], record)
        kind = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        return [*frames, self._event(kind, response=body)]

    def stream_error(self, err: APIError) -> list[bytes]:
        err = _as_responses(err)
        failed = self._response("failed", [self._item_body(i, True, "incomplete") for i in self._items], None)
        failed["error"] = {"code": err.code or err.type, "message": err.message}
        return [self._event("error", code=err.code or err.type, message=err.message, param=err.param),
                self._event("response.failed", response=failed)]

    def error_response(self, err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
        return _error_response(err, headers)


# a responses request is served as a chat request: an error about one of the chat fields names the
# responses field it came from (longest prefix first), so a client can find what to fix in what it sent
_CHAT_PARAMS = (("response_format.json_schema", "text.format"), ("response_format", "text.format"),
                ("messages", "input"))


def _as_responses(err: APIError) -> APIError:
    param = err.param or ""
    for chat, ours in _CHAT_PARAMS:
        if param == chat or param.startswith(chat + "."):
            field = chat.partition(".")[0]   # a message may name the chat field too ("response_format: ...")
            message = err.message
            if message.startswith(field + ":"):
                message = ours + message[len(field):]
            return APIError(err.status, message, type=err.type, param=ours + param[len(chat):], code=err.code,
                            headers=err.headers)
    return err


def _error_response(err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    return _as_responses(err).response(headers)


def _translate(data: dict[str, Any], request: Request, state: GatewayState) -> Admitted:
    req = parse(ResponsesRequest, data)
    check_model(req.model, state)
    chat = parse(ChatCompletionRequest, to_chat_request(req))
    spec = chat_spec(chat, forced_engine(req.engine, request, state), state.config)
    return Admitted(spec, req.stream, True, ResponsesRenderer(model=state.backend.model_id, request=req))


RESPONSES = Endpoint("responses", _translate, _error_response)


async def responses(request: Request) -> Response:
    return await generate(request, RESPONSES)


def _input_tokens_spec(data: dict[str, Any], state: GatewayState) -> RequestSpec:
    req = parse(InputTokensRequest, data)
    check_model(req.model, state)
    return chat_spec(parse(ChatCompletionRequest, to_chat_request(req.request())), None, state.config)


async def input_tokens(request: Request) -> Response:
    """POST /v1/responses/input_tokens: the prompt tokens a responses request with this input would have."""
    return await count_prompt_tokens(request, "responses", _input_tokens_spec, _error_response,
                                     lambda tokens: InputTokenCount(input_tokens=tokens).model_dump())


def _last_status(record: RequestRecord) -> str | None:
    """The last output item's status: "incomplete" when max_output_tokens cut it, as OpenAI marks the
    item it cut (agents read an item's status, not only the response's)."""
    return "incomplete" if record.finish_reason == "length" else None
