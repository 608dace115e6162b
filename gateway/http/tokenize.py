"""POST /tokenize and POST /detokenize: the model's tokenizer, as vLLM's server (and llama.cpp's) expose it.

Clients count and cut their context by these (SillyTavern, agent frameworks that budget a conversation, eval
harnesses): a text prompt is tokenized as /v1/completions tokenizes it, a conversation (`messages`) through
the model's chat template as /v1/chat/completions renders it (tools, template switches, generation prompt),
so the count is the prompt the server would run. llama.cpp's body (`content`) is answered in its shape.
Nothing is queued and no MLX runs: the tokenizer and the template only, off the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contracts.errors import InvalidRequestError

from .errors import bad_request, from_exception
from .generate import check_model, parse, read_json_object
from .request_spec import chat_spec
from .schemas import ChatCompletionRequest, ChatMessage, ChatTool, _Strict
from .state import GatewayState

class TokenizeTextRequest(_Strict):
    """vLLM's completion form: a text prompt."""

    model: str | None = None
    prompt: str
    # the prompt is tokenized as /v1/completions tokenizes it (no special tokens added), whatever this says
    add_special_tokens: bool | None = None
    return_token_strs: bool | None = None


class TokenizeChatRequest(_Strict):
    """vLLM's chat form: a conversation through the model's chat template."""

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ChatTool] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    add_special_tokens: bool | None = None   # the template writes the special tokens itself
    return_token_strs: bool | None = None


class TokenizeContentRequest(_Strict):
    """llama.cpp's form: `content`, answered in its shape."""

    content: str
    add_special: bool | None = None   # as add_special_tokens: the completion's tokenization
    with_pieces: bool | None = None


class Tokenized(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None   # each token decoded on its own (a piece of a character may read "�")


class TokenPiece(BaseModel):
    id: int
    piece: str


class TokenizedContent(BaseModel):
    tokens: list[int] | list[TokenPiece]


class DetokenizeRequest(_Strict):
    model: str | None = None
    tokens: list[int]


class Detokenized(BaseModel):
    prompt: str    # vLLM's field
    content: str   # llama.cpp's field: the same text


def _chat_ids(data: dict[str, Any], state: GatewayState) -> list[int]:
    """The conversation as /v1/chat/completions renders it (its own checks: tools, template switches, limits)."""
    fields = ("model", "messages", "tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message")
    spec = chat_spec(parse(ChatCompletionRequest, {k: data[k] for k in fields if data.get(k) is not None}), None,
                     state.config)
    return state.backend.chat_prompt(spec.messages, spec.tools, spec.tool_choice, spec.template_kwargs,
                                     spec.continue_final).ids


def _pieces(ids: list[int], state: GatewayState) -> list[str]:
    return [state.backend.prompt_text([token]) for token in ids]


def _tokenize(data: dict[str, Any], state: GatewayState) -> BaseModel:
    if "content" in data and "prompt" not in data and "messages" not in data:
        llama = parse(TokenizeContentRequest, data)
        ids = state.backend.encode_prompt(llama.content) if llama.content else []
        if llama.with_pieces:
            return TokenizedContent(tokens=[TokenPiece(id=t, piece=p) for t, p in zip(ids, _pieces(ids, state))])
        return TokenizedContent(tokens=ids)
    req: TokenizeTextRequest | TokenizeChatRequest
    if "messages" in data:
        req = parse(TokenizeChatRequest, data)
        check_model(req.model, state)
        ids = _chat_ids(data, state)
    else:
        req = parse(TokenizeTextRequest, data)
        check_model(req.model, state)
        ids = state.backend.encode_prompt(req.prompt) if req.prompt else []
    return Tokenized(count=len(ids), max_model_len=state.backend.context_length, tokens=ids,
                     token_strs=_pieces(ids, state) if req.return_token_strs else None)


def _detokenize(data: dict[str, Any], state: GatewayState) -> BaseModel:
    req = parse(DetokenizeRequest, data)
    check_model(req.model, state)
    try:
        text = state.backend.prompt_text(req.tokens) if req.tokens else ""
    except InvalidRequestError as exc:   # an id past the vocabulary: the error names this body's field
        raise bad_request(str(exc).replace("prompt:", "tokens:", 1), param="tokens", code=exc.code) from None
    return Detokenized(prompt=text, content=text)


async def _answer(request: Request, work: Callable[[dict[str, Any], GatewayState], BaseModel]) -> Response:
    state: GatewayState = request.app.state.gateway
    try:
        with request.app.state.body_budget.slot():
            data = await read_json_object(request, state.config.max_body_bytes, state.config.body_read_timeout_seconds)
        # the tokenizer and the chat template, no MLX: off the event loop and off the model's worker
        reply = await run_in_threadpool(work, data, state)
    except Exception as exc:  # noqa: BLE001 - every failure is an OpenAI error object
        err = from_exception(exc)
        state.metrics.count_request("other", None, None, err.status)
        return err.response()
    state.metrics.count_request("other", None, None, 200)
    return JSONResponse(reply.model_dump(mode="json", exclude_none=True))


async def tokenize(request: Request) -> Response:
    """POST /tokenize: a prompt's or a conversation's token ids, their count and the context length."""
    return await _answer(request, _tokenize)


async def detokenize(request: Request) -> Response:
    """POST /detokenize: token ids back to text."""
    return await _answer(request, _detokenize)
