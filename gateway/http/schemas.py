"""OpenAI request/response shapes (pydantic v2). Unknown fields are rejected (extra="forbid") and types
are strict (no "5" for 5, no 1 for true), so what is accepted is exactly what /openapi.json says."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

INT32_MAX = 2**31 - 1


def _whole_number(value: Any) -> Any:
    """JSON does not tell 5.0 from 5 (nor does JSON Schema's "integer"): accept whole floats as ints."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Int = Annotated[int, BeforeValidator(_whole_number)]
# constraints before the validator, or pydantic writes them into the JSON schema as "ge"/"le"
PositiveInt32 = Annotated[int, Field(ge=1, le=INT32_MAX), BeforeValidator(_whole_number)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, value: Any) -> Any:
        # Say plainly why an image/audio part fails instead of pydantic's union-member noise.
        if isinstance(value, list):
            for part in value:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind != "text":
                    raise ValueError(f"only text content parts are supported, got {kind!r}")
        return value

    @model_validator(mode="after")
    def _content_required(self) -> "ChatMessage":
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a {self.role} message needs content")
        return self

    def text(self) -> str:
        """Content as one string; text parts join with newlines (as vLLM does)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content)


class StreamOptions(_Strict):
    include_usage: bool = False
    include_obfuscation: bool | None = None  # OpenAI option; we never pad, so it is harmless


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class _SamplingFields(_Strict):
    """Fields chat and text completions share."""

    model: str | None = None
    max_tokens: PositiveInt32 | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: Annotated[int, Field(ge=-1, le=INT32_MAX), BeforeValidator(_whole_number)] | None = None  # 0/-1: off
    min_p: float | None = Field(None, ge=0.0, lt=1.0)   # the sampler needs p_max * min_p < p_max
    seed: Annotated[int, Field(ge=0, le=2**63 - 1), BeforeValidator(_whole_number)] | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    engine: str | None = None                # Switchyard: raw | mtp | ddtree | auto
    # OpenAI fields accepted when harmless, rejected (gateway.validation) when they would change the result.
    user: str | None = None
    n: Int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: Any = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: PositiveInt32 | None = None
    response_format: ResponseFormat | None = None
    top_logprobs: Int | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    functions: list[Any] | None = None
    function_call: Any = None


class CompletionRequest(_SamplingFields):
    prompt: str | list[Any]
    echo: bool | None = None
    suffix: str | None = None
    best_of: Int | None = None


# ---- responses ----


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str | None = None


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None = None
    logprobs: None = None


class Completion(BaseModel):
    """`text_completion`: the full response, and also each streamed chunk (as OpenAI does)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "switchyard"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# ---- errors and service views (documented in /openapi.json) ----


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """Every non-2xx body: OpenAI's error object."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorDetail


class Health(BaseModel):
    """GET /health: 200 with these fields; 503 adds `error` and says status "unavailable"."""

    status: Literal["ok", "unavailable"]
    model: str | None = None
    engines: list[str] | None = None
    requests_waiting: int | None = None
    requests_running: int | None = None
    error: ErrorDetail | None = None
