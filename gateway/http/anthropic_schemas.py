"""Anthropic Messages API request shapes (POST /v1/messages), as Claude-Code-style clients send them.
Unknown fields are rejected; prompt-caching hints (`cache_control`) and citations are accepted and
ignored (they never change the output)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from .schemas import (TOOL_NAME, DirectCallers, FunctionDefinition, NonNegativeInt, PositiveInt32, Stream, Undeferred,
                      not_hosted, only_kinds)


class _Anthropic(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextBlock(_Anthropic):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None
    citations: list[Any] | None = None


class DirectCaller(_Anthropic):
    """Who made a call: the model itself. Anthropic's API returns it on every tool_use block, and clients
    send the blocks back as returned; a call made from code execution (a server tool) has another type."""

    type: Literal["direct"]


class ToolUseBlock(_Anthropic):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None
    caller: DirectCaller | None = None


class PlainTextSource(_Anthropic):
    type: Literal["text"]
    media_type: Literal["text/plain"]
    data: str

    def text(self) -> str:
        return self.data


class ContentSource(_Anthropic):
    """A document given as its text blocks (citable chunks)."""

    type: Literal["content"]
    content: str | list[TextBlock]

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        return only_kinds(value, ("text",), "document content blocks", "text-only model")

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "\n".join(block.text for block in self.content)


class DocumentBlock(_Anthropic):
    """A document this model can read: plain text. A PDF, a URL or a file id is refused with the reason."""

    type: Literal["document"]
    source: Annotated[PlainTextSource | ContentSource, Field(discriminator="type")]
    title: str | None = None
    context: str | None = None
    citations: dict[str, Any] | None = None   # accepted; no citations are returned
    cache_control: dict[str, Any] | None = None

    @field_validator("source", mode="before")
    @classmethod
    def _text_sources(cls, value: Any) -> Any:
        return only_kinds([value], ("text", "content"), "document sources",
                          "text-only model: send the document's text")[0]

    def text(self) -> str:
        return "\n".join(part for part in (self.title, self.context, self.source.text()) if part)


ToolResultContent = Annotated[TextBlock | DocumentBlock, Field(discriminator="type")]


class ToolResultBlock(_Anthropic):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ToolResultContent] | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, value: Any) -> Any:   # e.g. an image the client's Read tool returned
        return only_kinds(value, ("text", "document"), "tool_result content blocks", "text-only model")

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "\n".join(part.text if isinstance(part, TextBlock) else part.text() for part in self.content)


class ThinkingBlock(_Anthropic):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Anthropic):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock | DocumentBlock,
                  Field(discriminator="type")]
BLOCK_TYPES = ("text", "tool_use", "tool_result", "thinking", "redacted_thinking", "document")


class AnthropicMessage(_Anthropic):
    role: Literal["user", "assistant"]
    content: str | list[Block]

    @field_validator("content", mode="before")
    @classmethod
    def _known_blocks(cls, value: Any) -> Any:
        return only_kinds(value, BLOCK_TYPES, "content blocks", "text-only model")


def _client_tools_only(value: Any) -> Any:
    """Server tools (web_search_20250305, code_execution_..., bash_..., text_editor_...) run on
    Anthropic's side; here the client runs every tool, so only custom tools (`type` absent or
    "custom") are accepted, with a plain reason instead of a missing `input_schema`."""
    if isinstance(value, list):
        for tool in value:
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind not in (None, "custom"):
                raise ValueError(f"tools of type {kind!r} are not supported (server tools; the client runs its "
                                 "tools, none are hosted here); supported: custom tools with an input_schema")
    return value


class AnthropicTool(_Anthropic):
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    cache_control: dict[str, Any] | None = None
    # hints the AI SDK's Anthropic provider sends on every streamed tool (eager_input_streaming) and with a
    # known model name (strict): a call streams its input in one delta here, and, as a chat function's
    # `strict`, a call the model chooses is not held to the schema (a forced one is decoded against it)
    eager_input_streaming: bool | None = None
    strict: bool | None = None
    # example inputs (Anthropic's tool-use examples): shown to the model with the tool's description
    input_examples: list[dict[str, Any]] | None = None
    defer_loading: Undeferred = None
    allowed_callers: DirectCallers = None

    def described(self) -> str | None:
        """The description the model reads: the tool's own, then its input examples as JSON, one a line (every
        chat template renders a function's description; not every one would render another field)."""
        if not self.input_examples:
            return self.description
        examples = "\n".join(json.dumps(example, ensure_ascii=False) for example in self.input_examples)
        return "\n\n".join(part for part in (self.description, f"Input examples:\n{examples}") if part)

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        # the same rule as an OpenAI function's parameters
        return FunctionDefinition.model_validate({"name": "x", "parameters": value}).parameters or {}


ClientTools = Annotated[list[AnthropicTool] | None, BeforeValidator(_client_tools_only)]


class AnthropicToolChoice(_Anthropic):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(_Anthropic):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: NonNegativeInt | None = None   # "enabled": the thinking is closed after this many tokens
    display: str | None = None                    # accepted; the thinking is returned in full


class OutputFormat(_Anthropic):
    """Anthropic's structured outputs: the reply is JSON matching `schema` (decoded against it)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Anthropic):
    effort: str | None = None            # accepted; the template's thinking has no levels
    format: OutputFormat | None = None


# What Claude Code sends to any model it does not know (every alias served here), and the structured
# outputs of Anthropic's API (`output_format` in beta, then `output_config.format`). Context editing
# (`context_management`: clearing old tool results or thinking) is not done here: the whole conversation
# is rendered, and one that outgrows the context is a "prompt is too long" 400, which Claude Code compacts.
class _ClaudeCodeFields(_Anthropic):
    context_management: dict[str, Any] | None = None
    # Anthropic's server-side features not hosted here: null / [] accepted, anything else a 400 naming them
    container: Annotated[str | dict[str, Any] | None, not_hosted(
        "containers belong to Anthropic's code execution tool, which is not hosted here: leave container out")] = None
    mcp_servers: Annotated[list[Any] | None, not_hosted(
        "the MCP connector is not hosted here (no server-side MCP calls): connect MCP servers in the client, "
        "as Claude Code does, and offer their tools as tools")] = None
    # hints: the prefix cache is automatic (top-level cache_control asks Anthropic for that); one speed
    cache_control: dict[str, Any] | None = None
    speed: Literal["standard", "fast"] | None = None
    output_config: OutputConfig | None = None
    output_format: OutputFormat | None = None


class CountTokensRequest(_ClaudeCodeFields):
    """POST /v1/messages/count_tokens: the conversation part of a messages request."""

    model: str
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: ClientTools = None
    tool_choice: AnthropicToolChoice | None = None
    thinking: ThinkingConfig | None = None


class MessagesRequest(_ClaudeCodeFields):
    model: str
    max_tokens: PositiveInt32
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    stop_sequences: list[str] | None = None
    stream: Stream = False
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)   # 0: the most likely token alone
    top_k: NonNegativeInt | None = None
    tools: ClientTools = None
    tool_choice: AnthropicToolChoice | None = None
    thinking: ThinkingConfig | None = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    # hints that change nothing a local server returns: one place, and no cache misses to diagnose
    inference_geo: str | None = None
    diagnostics: dict[str, Any] | None = None
    engine: str | None = None   # Switchyard: raw | mtp | ddtree | auto


class TokenCount(BaseModel):
    input_tokens: int


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicErrorResponse(BaseModel):
    """Every non-2xx body of /v1/messages: Anthropic's error object."""

    type: Literal["error"] = "error"
    error: AnthropicErrorDetail
