"""POST /v1/messages: the Anthropic Messages API as a thin translation onto the chat pipeline —
the request becomes an OpenAI chat request (same validation, engines, router, limits, auth and
metrics), and the reply is shaped as a message with thinking, text and tool_use blocks, or as
Anthropic's stream events (message_start, content_block_*, message_delta, message_stop)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic_core import from_json
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contracts.chat import CallDelta, ToolCall
from contracts.engine import GenerationChunk
from gateway.worker.spec import RequestSpec

from .anthropic_errors import error_body, error_response
from .anthropic_schemas import (
    AnthropicMessage,
    CountTokensRequest,
    DocumentBlock,
    MessagesRequest,
    TextBlock,
    ThinkingBlock,
    TokenCount,
    ToolResultBlock,
    ToolUseBlock,
)
from .errors import APIError
from .generate import Admitted, Endpoint, check_model, count_prompt_tokens, forced_engine, generate, parse
from .record import ChoiceReply, RequestRecord
from .render import around_text
from .request_spec import chat_spec
from .schemas import ChatCompletionRequest
from .sse import ANTHROPIC_SSE, StreamFormat, event
from .state import GatewayState

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "cancelled": "end_turn"}
def _text(blocks: str | list[TextBlock] | None) -> str:
    if blocks is None or isinstance(blocks, str):
        return blocks or ""
    return "\n".join(block.text for block in blocks)


def _openai_messages(message: AnthropicMessage) -> list[dict[str, Any]]:
    """One Anthropic turn as OpenAI messages: tool results become `tool` messages (before the user's
    own text, in order); an assistant's thinking, text and tool_use blocks become one message."""
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    if message.role == "user":
        out: list[dict[str, Any]] = []
        texts = []
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                prefix = "Error: " if block.is_error else ""
                out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": prefix + block.text()})
            elif isinstance(block, TextBlock):
                texts.append(block.text)
            elif isinstance(block, DocumentBlock):
                texts.append(block.text())
        if texts:
            out.append({"role": "user", "content": "\n".join(texts)})
        return out
    reply: dict[str, Any] = {"role": "assistant", "content": "\n".join(
        b.text for b in message.content if isinstance(b, TextBlock))}
    thinking = "".join(b.thinking for b in message.content if isinstance(b, ThinkingBlock))
    if thinking:
        reply["reasoning_content"] = thinking
    calls = [{"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
             for b in message.content if isinstance(b, ToolUseBlock)]
    if calls:
        reply["tool_calls"] = calls
    return [reply]


def _check_tool_results(messages: list[AnthropicMessage]) -> None:
    """Anthropic's rule: every tool_result answers a tool_use of the assistant turn just before it, where
    consecutive messages of one role are one turn (the API merges them). (A result answering nothing, e.g. a
    conversation that opens with one, would otherwise reach the chat template, which refuses it in its own
    words.)"""
    called: set[str] = set()
    previous_role = None
    for index, message in enumerate(messages):
        blocks = message.content if isinstance(message.content, list) else []
        if message.role == "assistant":
            uses = {block.id for block in blocks if isinstance(block, ToolUseBlock)}
            called = called | uses if previous_role == "assistant" else uses
        for number, block in enumerate(blocks):
            if isinstance(block, ToolResultBlock) and block.tool_use_id not in called:
                raise APIError(400, f"messages.{index}.content.{number}: the tool_result's tool_use_id "
                               f"{block.tool_use_id!r} answers no tool_use block of the previous message; each "
                               "tool_result must answer a tool_use of the assistant message just before it.",
                               param=f"messages.{index}.content.{number}.tool_use_id", code="unmatched_tool_result")
        previous_role = message.role


def _blocks(message: AnthropicMessage) -> list[Any]:
    return [TextBlock(type="text", text=message.content)] if isinstance(message.content, str) else message.content


def _merged_turns(messages: list[AnthropicMessage]) -> list[AnthropicMessage]:
    """Consecutive messages of one role as one turn, their blocks in order, as Anthropic's API combines them
    (clients that keep each block of a reply as its own message send them so)."""
    turns: list[AnthropicMessage] = []
    for message in messages:
        if turns and turns[-1].role == message.role:
            turns[-1] = turns[-1].model_copy(update={"content": _blocks(turns[-1]) + _blocks(message)})
        else:
            turns.append(message)
    return turns


def _check_prefill(final: dict[str, Any]) -> None:
    """Anthropic refuses a prefill ending in whitespace, in these words (a BPE model writes a word's space
    with the word, so a reply continuing after one starts out of its habits): the same 400 here."""
    text = final["content"]
    if text != text.rstrip():
        raise APIError(400, "messages: final assistant content cannot end with trailing whitespace",
                       param="messages", code="invalid_prefix")


def to_chat_request(req: MessagesRequest) -> dict[str, Any]:
    _check_tool_results(req.messages)
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": _text(req.system)})
    for message in _merged_turns(req.messages):
        messages.extend(_openai_messages(message))
    if not any(m["role"] != "system" for m in messages):
        raise APIError(400, "the conversation holds no text or tool result to answer.", param="messages",
                       code="empty_conversation")
    final = messages[-1]
    if req.messages[-1].role == "assistant" and final["role"] == "assistant" and "tool_calls" not in final:
        _check_prefill(final)
        final["prefix"] = True   # Anthropic's prefill: the reply continues this text (and holds only the rest)
    body: dict[str, Any] = {"model": req.model, "messages": messages, "max_tokens": req.max_tokens,
                            "stream": req.stream, "engine": req.engine}
    for name in ("temperature", "top_p", "top_k"):
        if getattr(req, name) is not None:
            body[name] = getattr(req, name)
    if req.stop_sequences:
        body["stop"] = req.stop_sequences
    if req.tools:
        body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.described(),
                                                           "parameters": t.input_schema}} for t in req.tools]
        for tool in body["tools"]:
            if tool["function"]["description"] is None:
                del tool["function"]["description"]
    choice = req.tool_choice
    if choice is not None:
        if choice.type == "tool":
            if choice.name is None:
                raise APIError(400, "tool_choice type 'tool' needs a `name`.", param="tool_choice")
            body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        elif req.tools or choice.type != "none":
            body["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
        if choice.disable_parallel_tool_use:
            body["parallel_tool_calls"] = False
    output = req.output_config.format if req.output_config and req.output_config.format else req.output_format
    if output is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": output.schema_}}
    if req.thinking is not None:   # absent: the template's default (Qwen3.6 thinks), as the model card says
        body["chat_template_kwargs"] = {"enable_thinking": req.thinking.type != "disabled"}
        if req.thinking.type == "enabled" and req.thinking.budget_tokens is not None:
            body["thinking_token_budget"] = req.thinking.budget_tokens
    return body


def _stop(choice: ChoiceReply) -> dict[str, Any]:
    """stop_reason and stop_sequence: "stop_sequence" with the string when one of the request's ended it."""
    if choice.finish_reason == "stop" and choice.stop_sequence is not None:
        return {"stop_reason": "stop_sequence", "stop_sequence": choice.stop_sequence}
    return {"stop_reason": STOP_REASONS.get(choice.finish_reason or "stop", "end_turn"), "stop_sequence": None}


def _usage(record: RequestRecord, output_tokens: int) -> dict[str, int]:
    """Anthropic counts cache reads apart from `input_tokens` (their sum is the prompt)."""
    return {"input_tokens": record.prompt_tokens - record.cached_tokens, "output_tokens": output_tokens,
            "cache_read_input_tokens": record.cached_tokens, "cache_creation_input_tokens": 0}


def _tool_input(arguments: str) -> dict[str, Any]:
    """A call's input as the stream's input_json_delta gives it to the anthropic SDK (jiter's partial
    mode): a call max_tokens cut off keeps its complete values only, never a cut string ("rm -rf" of
    "rm -rf build") nor the cut JSON as text."""
    try:
        value = from_json(arguments, allow_partial=True) if arguments.strip() else {}
    except ValueError:
        value = {}
    return value if isinstance(value, dict) else {}


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call.arguments)}


@dataclass
class AnthropicRenderer:
    stream_format: ClassVar[StreamFormat] = ANTHROPIC_SSE
    model: str
    id: str = field(default_factory=lambda: "msg_" + uuid.uuid4().hex)
    _open: str | None = None      # the kind of the content block being streamed
    _index: int = -1              # its index

    def full(self, record: RequestRecord) -> dict[str, Any]:
        choice = record.choices[0] if record.choices else ChoiceReply(0)
        content: list[dict[str, Any]] = []
        if choice.reasoning_text:
            content.append({"type": "thinking", "thinking": choice.reasoning_text, "signature": ""})
        if choice.content:
            content.append({"type": "text", "text": choice.content})
        content.extend(_tool_use(call) for call in choice.tool_calls)
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                **_stop(choice), "usage": _usage(record, record.completion_tokens)}

    def choice_started(self, choice: ChoiceReply) -> list[bytes]:
        return []

    def opening(self, record: RequestRecord) -> list[bytes]:
        message = {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                   "stop_reason": None, "stop_sequence": None,
                   "usage": _usage(record, 0)}
        return [event({"type": "message_start", "message": message}, "message_start")]

    def chunk(self, choice: ChoiceReply, chunk: GenerationChunk) -> list[bytes]:
        going_on, opening = around_text(chunk.call_deltas)
        frames = [frame for delta in going_on for frame in self._call(delta)]
        if chunk.reasoning:
            frames += self._block("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            frames.append(self._delta({"type": "thinking_delta", "thinking": chunk.reasoning}))
        if chunk.text:
            frames += self._block("text", {"type": "text", "text": ""})
            frames.append(self._delta({"type": "text_delta", "text": chunk.text}))
        for delta in opening:
            frames += self._call(delta)
        return frames

    def _call(self, delta: CallDelta) -> list[bytes]:
        """A call opens a tool_use block; its arguments follow as input_json_delta."""
        frames = self._block("tool_use", {"type": "tool_use", "id": delta.id, "name": delta.name, "input": {}},
                             always_new=True) if delta.opens else []
        if delta.arguments:
            frames.append(self._delta({"type": "input_json_delta", "partial_json": delta.arguments}))
        return frames

    def closing(self, record: RequestRecord, include_usage: bool) -> list[bytes]:
        choice = record.choices[-1] if record.choices else ChoiceReply(0)
        # the whole usage, as Anthropic's message_delta carries it (the SDK's stream takes each count given)
        delta = {"type": "message_delta", "delta": _stop(choice), "usage": _usage(record, record.completion_tokens)}
        return [*self._close(), event(delta, "message_delta"), event({"type": "message_stop"}, "message_stop")]

    def stream_error(self, err: APIError) -> list[bytes]:
        return [event(error_body(err), "error")]

    def error_response(self, err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
        return error_response(err, headers)

    def _block(self, kind: str, start: dict[str, Any], always_new: bool = False) -> list[bytes]:
        if self._open == kind and not always_new:
            return []
        frames = self._close()
        self._index += 1
        self._open = kind
        return [*frames, event({"type": "content_block_start", "index": self._index, "content_block": start},
                               "content_block_start")]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return event({"type": "content_block_delta", "index": self._index, "delta": delta}, "content_block_delta")

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open = None
        return [event({"type": "content_block_stop", "index": self._index}, "content_block_stop")]


def _translate(data: dict[str, Any], request: Request, state: GatewayState) -> Admitted:
    req = parse(MessagesRequest, data)
    check_model(req.model, state)
    chat = parse(ChatCompletionRequest, to_chat_request(req))
    spec = chat_spec(chat, forced_engine(req.engine, request, state), state.config)
    return Admitted(spec, req.stream, True, AnthropicRenderer(model=req.model))


MESSAGES = Endpoint("messages", _translate, error_response, id_headers=("X-Request-Id", "request-id"))


async def messages(request: Request) -> Response:
    return await generate(request, MESSAGES)


def _count_spec(data: dict[str, Any], state: GatewayState) -> RequestSpec:
    req = parse(CountTokensRequest, data)
    check_model(req.model, state)
    conversation = MessagesRequest.model_validate({**req.model_dump(exclude_none=True), "max_tokens": 1})
    return chat_spec(parse(ChatCompletionRequest, to_chat_request(conversation)), None, state.config)


async def count_tokens(request: Request) -> Response:
    """POST /v1/messages/count_tokens (Claude Code sizes its context with it)."""
    return await count_prompt_tokens(request, "messages", _count_spec, error_response,
                                     lambda tokens: TokenCount(input_tokens=tokens).model_dump())
