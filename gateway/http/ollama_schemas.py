"""Ollama's request and reply bodies as pydantic models: the handlers (gateway.http.ollama) validate requests
with them, and /openapi.json documents the Ollama routes from them (gateway.http.openapi)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from .ollama_options import OllamaOptions
from .schemas import ChatTool, PositiveInt32, _Strict


class OllamaFunction(_Strict):
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    index: int | None = None


class OllamaToolCall(_Strict):
    id: str | None = None
    type: Literal["function"] | None = None
    function: OllamaFunction


class OllamaMessage(_Strict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = ""
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None

    @field_validator("images")
    @classmethod
    def _no_images(cls, value: list[str] | None) -> list[str] | None:
        if value:
            raise ValueError("images are not supported (this is a text-only model)")
        return value


Think = bool | Literal["low", "medium", "high"] | None
Format = Literal["json", ""] | dict[str, Any] | None


class OllamaRequest(_Strict):
    model: str | None = None
    format: Format = None
    options: OllamaOptions | None = None
    stream: bool | None = None            # Ollama streams unless told false
    keep_alive: str | int | float | None = None   # how long Ollama keeps a model loaded: the one model stays
    think: Think = None
    engine: str | None = None             # Switchyard: raw | mtp | ddtree | auto


class OllamaChatRequest(OllamaRequest):
    messages: list[OllamaMessage] | None = None   # none or empty: the load call (null as Ollama reads it)
    tools: list[ChatTool] | None = None   # OpenAI-shaped, as Ollama's are


class OllamaGenerateRequest(OllamaRequest):
    prompt: str | None = None   # none or empty: the load call
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool | None = None
    images: list[str] | None = None

    @field_validator("template", "context", "images")
    @classmethod
    def _not_run_here(cls, value: Any, info: ValidationInfo) -> Any:
        if value:
            raise ValueError(f"{info.field_name} is not supported here (the model's own chat template renders the "
                             "prompt; send the conversation to /api/chat, or the raw text with raw: true)")
        return value


class OllamaEmbedRequest(_Strict):
    """/api/embed: one text or several (none, "" or []: the load call)."""

    model: str | None = None
    input: str | list[str] | None = None
    truncate: bool | None = None          # true (the default): cut an input to the context; false: a 400
    dimensions: PositiveInt32 | None = None   # the first d components, renormalised
    options: dict[str, Any] | None = None   # Ollama's runner options: none changes an embedding (not read)
    keep_alive: str | int | float | None = None


class OllamaEmbeddingsRequest(_Strict):
    """/api/embeddings, Ollama's older call: one text (none or "": the load call)."""

    model: str | None = None
    prompt: str | None = None
    options: dict[str, Any] | None = None   # as /api/embed's
    keep_alive: str | int | float | None = None


# ---- replies (what the handlers send; documented in /openapi.json, checked there by the schema fuzzer)

class OllamaReplyFunction(BaseModel):
    index: int
    name: str
    arguments: dict[str, Any] | str   # an object; the text so far when num_predict cut the call off


class OllamaReplyToolCall(BaseModel):
    id: str
    function: OllamaReplyFunction


class OllamaReplyMessage(BaseModel):
    role: Literal["assistant"]
    content: str
    thinking: str | None = None
    tool_calls: list[OllamaReplyToolCall] | None = None


class _Reply(BaseModel):
    """One NDJSON line of a stream, or the whole reply: the last (done) one carries the counts (nanoseconds)."""

    model: str
    created_at: str
    done: bool
    done_reason: Literal["stop", "length", "load", "unload"] | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


class OllamaChatResponse(_Reply):
    message: OllamaReplyMessage


class OllamaGenerateResponse(_Reply):
    response: str
    thinking: str | None = None


class OllamaModelDetails(BaseModel):
    parent_model: str
    format: str
    family: str
    families: list[str] | None = None
    parameter_size: str
    quantization_level: str


class OllamaModel(BaseModel):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: OllamaModelDetails


class OllamaTags(BaseModel):
    models: list[OllamaModel]


class OllamaRunningModel(BaseModel):
    name: str
    model: str
    size: int
    digest: str
    details: OllamaModelDetails
    expires_at: str
    size_vram: int
    context_length: int


class OllamaRunning(BaseModel):
    models: list[OllamaRunningModel]


class OllamaShowRequest(BaseModel):
    model_config = ConfigDict(strict=True)   # other fields Ollama's clients send (system, options) are ignored

    model: str | None = None
    name: str | None = None   # the older clients' field for the model
    verbose: bool | None = None


class OllamaShow(BaseModel):
    modelfile: str
    parameters: str
    template: str
    details: OllamaModelDetails
    model_info: dict[str, Any]
    capabilities: list[str]
    modified_at: str


class OllamaVersion(BaseModel):
    version: str


class OllamaEmbedResponse(BaseModel):
    model: str
    embeddings: list[list[float]]   # unit vectors, one per input in order
    total_duration: int
    load_duration: int
    prompt_eval_count: int


class OllamaEmbeddingsResponse(BaseModel):
    embedding: list[float]          # not normalised, as Ollama's older call returns it ([] for the load call)


class OllamaError(BaseModel):
    """Ollama's error body (the ollama client raises ResponseError with `error`)."""

    error: str
