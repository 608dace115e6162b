"""OpenAI Responses API request shapes (POST /v1/responses), as Codex-style clients send them.
The server keeps no responses (stateless: `store` is accepted, `previous_response_id` is not)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from .schemas import (
    CUSTOM_INPUT,
    TOOL_NAME,
    CacheBreakpoint,
    CacheRetention,
    DirectCallers,
    FunctionDefinition,
    JsonSchemaFormat,
    Penalty,
    PositiveInt32,
    ReasoningEffort,
    Stream,
    TopLogprobs,
    Synchronous,
    Undeferred,
    custom_tool_function,
    not_hosted,
    only_kinds,
    refusals_as_text,
    text_format_only,
    tool_kind,
)


class _Responses(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ContentText(_Responses):
    type: Literal["input_text", "output_text", "text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None
    prompt_cache_breakpoint: CacheBreakpoint = None


class MessageItem(_Responses):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentText]
    id: str | None = None
    status: str | None = None
    # OpenAI labels assistant messages as commentary or the final answer and asks clients to send the label
    # back (Codex keeps it on the items it resends); the model here writes one kind of message: a hint
    phase: Literal["commentary", "final_answer"] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        # an assistant message sent back as the API returned it may hold a refusal: its words are its text
        value = refusals_as_text(value, "output_text")
        return only_kinds(value, ("input_text", "output_text", "text"), "content parts", "text-only model")

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "\n".join(p.text for p in self.content)


class _CallItem(_Responses):
    """A tool call sent back in `input`: what function and custom tool calls share."""

    call_id: str
    name: str
    id: str | None = None
    status: str | None = None


class DirectCaller(_Responses):
    """Who made a call: the model itself (OpenAI returns it on function calls; clients send the items back as
    returned). A call made by a program (code execution, not hosted here) has another type: a 400."""

    type: Literal["direct"]


class FunctionCallItem(_CallItem):
    type: Literal["function_call"]
    arguments: str
    async_: bool | None = Field(None, alias="async")   # how the client ran it: history, either way
    caller: DirectCaller | None = None
    namespace: Annotated[str | None, not_hosted(
        "namespaced tools are not supported (tools of type namespace are not offered here): send the call "
        "without a namespace")] = None

    def chat_call(self) -> dict[str, Any]:
        return {"id": self.call_id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class CustomToolCallItem(_CallItem):
    """A custom tool's call sent back: the model wrote its input as the one string argument."""

    type: Literal["custom_tool_call"]
    input: str

    def chat_call(self) -> dict[str, Any]:
        return {"id": self.call_id, "type": "function",
                "function": {"name": self.name, "arguments": json.dumps({CUSTOM_INPUT: self.input})}}


class FunctionCallOutputItem(_Responses):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ContentText]
    id: str | None = None
    status: str | None = None

    @field_validator("output", mode="before")
    @classmethod
    def _text_parts(cls, value: Any) -> Any:
        # a tool's image output is refused as a message's image is, with the reason
        return only_kinds(value, ("input_text", "output_text", "text"), "content parts", "text-only model")

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "\n".join(p.text for p in self.output)


class CustomToolCallOutputItem(FunctionCallOutputItem):
    type: Literal["custom_tool_call_output"]   # type: ignore[assignment]


class ReasoningItem(_Responses):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[dict[str, Any]] = []
    content: list[dict[str, Any]] | None = None
    encrypted_content: str | None = None
    status: str | None = None

    def text(self) -> str:
        parts = self.content or self.summary
        return "".join(str(p.get("text", "")) for p in parts)


ITEM_TYPES = ("message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output",
              "reasoning")


class UnsupportedItem(_Responses):
    """Any other input item type (item_reference needs stored items; hosted tools' calls): a plain 400."""

    @model_validator(mode="before")
    @classmethod
    def _refuse(cls, value: Any) -> Any:
        kind = value.get("type") if isinstance(value, dict) else None
        why = "a stateless server with no hosted tools: send the items themselves"
        if kind == "item_reference":   # the AI SDK's openai provider refers back to earlier output unless told not to
            why = ("they refer to stored items and none are stored here: send the items themselves, as the AI "
                   "SDK's openai provider does with providerOptions: {openai: {store: false}}")
        raise ValueError(f"input items of type {kind!r} are not supported ({why}); supported: {', '.join(ITEM_TYPES)}")

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        return {"not": {}}   # accepts nothing: /openapi.json lists only the supported items


# each item type's tag in the union, capitalised: not part of an error's param path ("input.2.output")
_ITEM_TAGS = {kind: "".join(word.title() for word in kind.split("_")) for kind in ITEM_TYPES}


def _item_kind(value: Any) -> str:
    kind = (value.get("type") if isinstance(value, dict) else getattr(value, "type", None)) or "message"
    return _ITEM_TAGS.get(kind, "Unsupported") if isinstance(kind, str) else "Unsupported"   # [null]: unhashable


Item = Annotated[Annotated[MessageItem, Tag(_ITEM_TAGS["message"])]
                 | Annotated[FunctionCallItem, Tag(_ITEM_TAGS["function_call"])]
                 | Annotated[FunctionCallOutputItem, Tag(_ITEM_TAGS["function_call_output"])]
                 | Annotated[CustomToolCallItem, Tag(_ITEM_TAGS["custom_tool_call"])]
                 | Annotated[CustomToolCallOutputItem, Tag(_ITEM_TAGS["custom_tool_call_output"])]
                 | Annotated[ReasoningItem, Tag(_ITEM_TAGS["reasoning"])]
                 | Annotated[UnsupportedItem, Tag("Unsupported")],
                 Discriminator(_item_kind)]


class FunctionTool(_Responses):
    type: Literal["function"]
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: Undeferred = None
    allowed_callers: DirectCallers = None
    output_schema: dict[str, Any] | None = None   # what the call's string output encodes: the client's to read
    async_: Synchronous = Field(None, alias="async")

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return FunctionDefinition.model_validate({"name": "x", "parameters": value}).parameters

    def function(self) -> dict[str, Any]:
        """The chat pipeline's function tool."""
        return self.model_dump(include=set(FunctionDefinition.model_fields), exclude_none=True)


class CustomToolFormat(_Responses):
    type: Literal["text"]


class CustomTool(_Responses):
    """A tool whose input is freeform text (Codex's apply_patch for some models): the model is offered a
    function taking that text as its one string argument, and its call comes back as a custom_tool_call."""

    type: Literal["custom"]
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = None
    format: CustomToolFormat | None = None   # absent: text
    defer_loading: Undeferred = None
    allowed_callers: DirectCallers = None
    async_: Synchronous = Field(None, alias="async")

    @field_validator("format", mode="before")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        return text_format_only(value)

    def function(self) -> dict[str, Any]:
        """The chat pipeline's function tool the model is offered for it."""
        return custom_tool_function(self.name, self.description)


ClientTool = Annotated[Annotated[FunctionTool, Tag("Function")] | Annotated[CustomTool, Tag("Custom")],
                       Discriminator(tool_kind)]


class NamedFunction(_Responses):
    """A forced call of one tool: a function, or a custom tool (which the model sees as a function)."""

    type: Literal["function", "custom"]
    name: str


class ResponsesAllowedTools(_Responses):
    """The Responses API's `allowed_tools` tool_choice: the tools this turn may call, of those given."""

    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[NamedFunction] = Field(min_length=1)


class ResponsesTextFormat(_Responses):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    def response_format(self) -> dict[str, Any]:
        if self.type == "json_object" and self.schema_ is not None:   # as chat's json_object takes one
            return {"type": "json_object", "schema": self.schema_}
        if self.type != "json_schema":
            return {"type": self.type}
        schema = JsonSchemaFormat(name=self.name or "response", schema=self.schema_ or {}, strict=self.strict)
        return {"type": "json_schema", "json_schema": schema.model_dump(by_alias=True, exclude_none=True)}


class TextConfig(_Responses):
    format: ResponsesTextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None   # accepted; no template switch for it


class ResponsesStreamOptions(_Responses):
    include_obfuscation: bool | None = None   # no obfuscation padding is sent either way


class ReasoningConfig(_Responses):
    effort: ReasoningEffort | None = None
    # asked for, the reasoning comes back as its summary (the whole text: no summariser runs here), where
    # clients that show summaries (Codex) read it; else as the item's reasoning_text content
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None   # the deprecated name of summary

    def wants_summary(self) -> bool:
        return (self.summary or self.generate_summary) is not None


# The `include` values OpenAI documents. Hosted tools' results and input images never occur here (no
# hosted tools; text-only), so asking for them changes nothing; reasoning.encrypted_content (Codex sends it
# with store false) has nothing to add: reasoning items carry their text, which clients send back as is.
Includable = Literal["file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
                     "message.input_image.image_url", "computer_call_output.output.image_url",
                     "code_interpreter_call.outputs", "reasoning.encrypted_content", "message.output_text.logprobs"]


def _includable(value: Any) -> Any:
    """An unknown value is a 400 naming it and the supported ones, as OpenAI answers it."""
    supported = get_args(Includable)
    if isinstance(value, str) and value not in supported:
        raise ValueError(f"{value!r} is not a supported include value; supported: {', '.join(supported)}")
    return value


# Responses fields asking for what this server does not do: only null is accepted (responses_api)
UNSUPPORTED_FIELDS = {
    "moderation": "no moderation runs on this server (moderate on the client's side)",
    "context_management": "no server-side compaction (a conversation that outgrows the context is a 400 with code "
                          "context_length_exceeded: compact it and resend)",
}


class _PromptFields(_Responses):
    """The fields of a responses request that make its prompt (what /v1/responses/input_tokens takes too)."""

    model: str | None = None
    input: str | list[Item]
    instructions: str | None = None
    tools: list[ClientTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedFunction | ResponsesAllowedTools | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    truncation: Literal["auto", "disabled"] | None = None   # "auto" is refused with the reason (to_chat_request)
    previous_response_id: str | None = None         # rejected: stateless server
    conversation: str | dict[str, Any] | None = None   # rejected: stateless server

    @field_validator("tools", mode="before")
    @classmethod
    def _client_tools_only(cls, value: Any) -> Any:
        # Codex offers its hosted web search by default (web_search = "cached"): say where it is turned off
        return only_kinds(value, ("function", "custom"), "tools", "the client runs its tools; none are hosted here: "
                          "leave hosted tools out, in Codex with web_search = \"disabled\" in config.toml")


class ResponsesRequest(_PromptFields):
    max_output_tokens: PositiveInt32 | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)   # 0: the most likely token alone
    top_logprobs: TopLogprobs | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    stream: Stream = False
    store: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    include: list[Annotated[Includable, BeforeValidator(_includable)]] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: CacheRetention = None
    prompt_cache_options: dict[str, Any] | None = None
    safety_identifier: str | None = None
    # Codex sends its installation id here on every request (openai/codex#16912): metadata for the
    # provider's analytics, nothing a reply depends on
    client_metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    background: bool | None = None                  # rejected when true
    # what this server does not do: only null is accepted (UNSUPPORTED_FIELDS)
    moderation: Any = None
    context_management: Any = None
    max_tool_calls: PositiveInt32 | None = None     # caps hosted-tool calls, of which there are none here
    # vendor features not hosted here: null / empty accepted, anything else a 400 naming the feature
    prompt: Annotated[dict[str, Any] | None, not_hosted(
        "stored prompt templates are not supported (none are stored here): send the instructions and input "
        "themselves")] = None
    background_options: Annotated[dict[str, Any] | None, not_hosted(
        "background execution is not supported (every response runs while the request waits): leave "
        "background_options out")] = None
    access_programs: Annotated[dict[str, Any] | None, not_hosted(
        "access programs are not supported (no access program tiers here): leave access_programs out")] = None
    image: Annotated[dict[str, Any] | None, not_hosted(
        "image options are not supported: this is a text-only model")] = None
    stream_options: ResponsesStreamOptions | None = None
    engine: str | None = None                       # Switchyard: raw | mtp | ddtree | auto


class InputTokensRequest(_PromptFields):
    """POST /v1/responses/input_tokens: the prompt of a responses request, counted."""

    personality: str | None = Field(None, max_length=64)   # a style preset: this model has one style

    def request(self) -> ResponsesRequest:
        """The responses request with this prompt (its other fields at their defaults)."""
        return ResponsesRequest.model_construct(**{name: getattr(self, name) for name in _PromptFields.model_fields})


class InputTokenCount(BaseModel):
    object: Literal["response.input_tokens"] = "response.input_tokens"
    input_tokens: int
