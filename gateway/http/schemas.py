"""OpenAI request/response shapes (pydantic v2). Unknown fields are rejected (extra="forbid") and types
are strict (no "5" for 5, no 1 for true), so what is accepted is exactly what /openapi.json says."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, ValidationError,
                      field_validator, model_validator)

INT32_MAX = 2**31 - 1


def _whole_number(value: Any) -> Any:
    """JSON does not tell 5.0 from 5 (nor does JSON Schema's "integer"): accept whole floats as ints."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Int = Annotated[int, BeforeValidator(_whole_number)]
# constraints before the validator, or pydantic writes them into the JSON schema as "ge"/"le"
PositiveInt32 = Annotated[int, Field(ge=1, le=INT32_MAX), BeforeValidator(_whole_number)]
NonNegativeInt = Annotated[int, Field(ge=0, le=INT32_MAX), BeforeValidator(_whole_number)]
# llama.cpp's and Ollama's repeat_last_n: the repetition penalty's window in tokens, -1 all of them, 0 off
RepeatLastN = Annotated[int, Field(ge=-1, le=INT32_MAX), BeforeValidator(_whole_number)]


def _null_is_false(value: bool | None) -> bool:
    return bool(value)


# OpenAI's `stream` is `boolean | null` (null: the default, no stream); clients that write out every optional
# field send the null, which was a 400 "Input should be a valid boolean"
Stream = Annotated[bool | None, AfterValidator(_null_is_false)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# A prompt-caching breakpoint (Anthropic's, as OpenRouter and LiteLLM take it on chat messages): the AI
# SDK's openai-compatible provider (opencode, ...) spreads `cache_control` onto messages, text parts and
# tool calls. Prefix caching here is automatic and never changes a reply, so the hint is accepted and ignored.
CacheControl = dict[str, Any] | None
# OpenAI's own prompt-caching options (a text part's breakpoint; a request's retention and options): the
# same kind of hint, accepted and ignored on chat and /v1/responses
CacheBreakpoint = dict[str, Any] | None
CacheRetention = Literal["in_memory", "24h"] | None


class TextPart(_Strict):
    type: Literal["text"]
    text: str
    cache_control: CacheControl = None
    prompt_cache_breakpoint: CacheBreakpoint = None


# the type names the three APIs give a text part ("text" on chat and Anthropic; the Responses API's two)
TEXT_KINDS = ("text", "input_text", "output_text")


def _undeferred(value: bool | None) -> bool | None:
    if value:
        raise ValueError("defer_loading needs tool search, a server-side tool not hosted here: send the tool "
                         "without it (every tool is offered to the model)")
    return value


def _direct_callers(value: list[str] | None) -> list[str] | None:
    others = [caller for caller in value or () if caller != "direct"]
    if others:
        raise ValueError(f"allowed_callers {others[0]!r} is not supported (no code execution is hosted here: the "
                         "model calls tools directly); supported: direct")
    return value


# A tool's fields for the vendors' server-side tool search and code execution (Anthropic's and the Responses API's
# tools have both): the values that ask for neither (the tool offered up front, called by the model) are accepted
Undeferred = Annotated[bool | None, AfterValidator(_undeferred)]
DirectCallers = Annotated[list[str] | None, AfterValidator(_direct_callers)]


def not_hosted(why: str) -> AfterValidator:
    """A field that asks for a vendor's server-side feature not hosted here: its empty values (null, false, [],
    {}, "": what clients that write out every field send) are accepted, anything else is a 400 saying `why`."""
    def check(value: Any) -> Any:
        if value not in (None, False, [], {}, ""):
            raise ValueError(why)
        return value
    return AfterValidator(check)


# the Responses API's asynchronous function tools (the model goes on without the call's output)
Synchronous = Annotated[bool | None, not_hosted(
    "asynchronous function calls are not supported (the model waits for each call's output): send async false or "
    "leave it out")]


def only_kinds(value: Any, allowed: tuple[str, ...], what: str, why: str) -> Any:
    """Before validation of a list of typed objects: say plainly why an unsupported `type` fails (an
    image part, a hosted tool) instead of pydantic's union-member noise. A text part written as another
    API writes it (a client that speaks both sent the Responses API's input_text to chat) is text: the
    error says which shape this API takes, not that the model reads no text."""
    if isinstance(value, list):
        for item in value:
            kind = item.get("type") if isinstance(item, dict) else None
            if kind in allowed:
                continue
            text = next((k for k in TEXT_KINDS if k in allowed), None)
            if kind in TEXT_KINDS and text is not None:
                raise ValueError(f"{what} of type {kind!r} are another API's text parts; this API writes text as "
                                 f"{{\"type\": \"{text}\", \"text\": ...}}")
            raise ValueError(f"{what} of type {kind!r} are not supported ({why}); supported: {', '.join(allowed)}")
    return value


def refusals_as_text(value: Any, text_type: str) -> Any:
    """Content parts with each `refusal` part (the API's assistant output, sent back as history) turned
    into a text part of `text_type` holding its words: the refusal is what the assistant said."""
    if not isinstance(value, list):
        return value
    return [{"type": text_type, "text": part["refusal"]}
            if isinstance(part, dict) and part.get("type") == "refusal" and isinstance(part.get("refusal"), str)
            else part for part in value]


def _text_parts_only(value: Any) -> Any:
    return only_kinds(value, ("text",), "content parts", "text-only model")


TOOL_NAME = r"^[A-Za-z0-9_.:-]{1,64}$"


class FunctionDefinition(_Strict):
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None   # a JSON schema of an object
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # the model reads the schema; a forced call (tool_choice required / named) is decoded against it
        # and compiled then (request_spec); otherwise only its kind is checked
        if value is not None and value.get("type", "object") != "object":
            raise ValueError("a function's parameters must be a JSON schema of type 'object'")
        return value


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDefinition

    @model_validator(mode="before")
    @classmethod
    def _chat_shape(cls, value: Any) -> Any:
        # a client that also speaks /v1/responses sends its flat tools here too: say which shape chat takes
        if isinstance(value, dict) and "function" not in value and "name" in value:
            raise ValueError("this tool is in the Responses API's flat shape ({type, name, parameters}); chat "
                             "completions take {\"type\": \"function\", \"function\": {\"name\", "
                             "\"description\", \"parameters\"}}")
        return value

    @field_validator("type", mode="before")
    @classmethod
    def _client_tool(cls, value: Any) -> Any:
        # custom tools validate as ChatCustomTool (tool_kind): any other type is a hosted tool
        if value != "function":
            raise ValueError(f"tools of type {value!r} are not supported (the client runs its tools; none are "
                             "hosted here); supported: function, custom")
        return value


# A custom tool's freeform input reaches the model as this one string argument of a function.
CUSTOM_INPUT = "input"


def custom_tool_function(name: str, description: str | None) -> dict[str, Any]:
    """The function a custom tool (freeform text input) is offered to the model as: one string argument."""
    function: dict[str, Any] = {"name": name, "parameters": {
        "type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}}, "required": [CUSTOM_INPUT]}}
    if description is not None:
        function["description"] = description
    return function


def text_format_only(value: Any) -> Any:
    """Before validation of a custom tool's `format`: a grammar binds every call's input, but here the model
    may answer in text or call any tool, so the input could only be constrained once a call of this tool
    had begun, which no engine does. Refused with that reason rather than pydantic's literal mismatch."""
    if isinstance(value, dict) and value.get("type") == "grammar":
        raise ValueError("custom tools whose input must follow a grammar are not supported (it cannot be "
                         "enforced on a call the model chooses to make); send format {\"type\": \"text\"} "
                         "or a function tool")
    return value


class CustomTextFormat(_Strict):
    type: Literal["text"]


class ChatCustomToolDefinition(_Strict):
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = None
    format: Annotated[CustomTextFormat | None, BeforeValidator(text_format_only)] = None   # absent: text


class ChatCustomTool(_Strict):
    """OpenAI's chat `custom` tool, whose input is freeform text (Codex's apply_patch): the model is offered
    a function taking that text as its one string argument, and its calls come back as custom calls."""

    type: Literal["custom"]
    custom: ChatCustomToolDefinition

    def as_function(self) -> Tool:
        return Tool(type="function", function=FunctionDefinition.model_validate(
            custom_tool_function(self.custom.name, self.custom.description)))


def tool_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "Custom" if kind == "custom" else "Function"   # capitalised: not part of the error's param path


ChatTool = Annotated[Annotated[Tool, Tag("Function")] | Annotated[ChatCustomTool, Tag("Custom")],
                     Discriminator(tool_kind)]


class FunctionName(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: FunctionName


class NamedCustomToolChoice(_Strict):
    """A forced call of one custom tool."""

    type: Literal["custom"]
    custom: FunctionName

    def as_function(self) -> NamedToolChoice:
        return NamedToolChoice(type="function", function=self.custom)


NamedChoice = Annotated[Annotated[NamedToolChoice, Tag("Function")] | Annotated[NamedCustomToolChoice, Tag("Custom")],
                        Discriminator(tool_kind)]


class AllowedTools(_Strict):
    mode: Literal["auto", "required"]
    tools: list[NamedChoice] = Field(min_length=1)


class AllowedToolChoice(_Strict):
    """OpenAI's `allowed_tools`: the request keeps its whole `tools` list (a stable prompt prefix for the
    provider's cache) and names the subset this turn may call; `required` means one of them must be."""

    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


def _choice_kind(value: Any) -> str:
    """The tool_choice's member by its shape, so that an error names what is wrong with that one (a custom
    choice missing `custom`) instead of what the first member of the union expected."""
    if isinstance(value, str):
        return "Mode"
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if kind == "custom":   # compared, not looked up: a client's `type` may be an object
        return "Custom"
    return "Allowed" if kind == "allowed_tools" else "Function"


ToolChoice = Annotated[Annotated[Literal["none", "auto", "required"], Tag("Mode")]
                       | Annotated[NamedToolChoice, Tag("Function")] | Annotated[NamedCustomToolChoice, Tag("Custom")]
                       | Annotated[AllowedToolChoice, Tag("Allowed")], Discriminator(_choice_kind)]


class FunctionCall(_Strict):
    name: str
    arguments: str | dict[str, Any] = "{}"   # the API's JSON string (an object is accepted too)


class ToolCallIn(_Strict):
    """An assistant turn's tool call, as a client sends the history back."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall
    index: Int | None = None   # streaming clients keep the delta's index
    cache_control: CacheControl = None


class CustomCall(_Strict):
    name: str
    input: str


class CustomToolCallIn(_Strict):
    """An assistant turn's call of a custom tool: the model wrote `input` as the function's one argument."""

    id: str | None = None
    type: Literal["custom"]
    custom: CustomCall
    index: Int | None = None
    cache_control: CacheControl = None

    @property
    def function(self) -> FunctionCall:
        """The call as the model wrote it: of the function the custom tool is offered as."""
        return FunctionCall(name=self.custom.name, arguments=json.dumps({CUSTOM_INPUT: self.custom.input},
                                                                        ensure_ascii=False))


ToolCallInAny = Annotated[Annotated[ToolCallIn, Tag("Function")] | Annotated[CustomToolCallIn, Tag("Custom")],
                          Discriminator(tool_kind)]


class _Message(_Strict):
    name: str | None = None
    cache_control: CacheControl = None

    @field_validator("content", mode="before", check_fields=False)
    @classmethod
    def _text_parts(cls, value: Any) -> Any:
        return _text_parts_only(value)

    def text(self) -> str:
        """Content as one string; text parts join with newlines (as vLLM does)."""
        content = getattr(self, "content", None)
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        return "\n".join(part.text for part in content)


class SystemMessage(_Message):
    role: Literal["system", "developer"]
    content: str | list[TextPart]


class UserMessage(_Message):
    role: Literal["user"]
    content: str | list[TextPart]

    @field_validator("role", mode="before")
    @classmethod
    def _known_role(cls, value: Any) -> Any:
        # unknown roles are validated here (see _message_tag): name them all, not just 'user'
        if isinstance(value, str) and value != "user":
            hint = " (the deprecated 'function' role: send tool messages)" if value == "function" else ""
            raise ValueError(f"unknown role {value!r}{hint}; supported: system, developer, user, assistant, tool")
        return value


class ThinkingBlockIn(_Strict):
    """An Anthropic thinking block kept on an OpenAI-shaped assistant turn: LiteLLM's `thinking_blocks`, which its
    Anthropic adapter writes from Claude Code's history (the signature "" where Claude gave none) and its
    Message carries back. The signature proves nothing here (no server signed it) and is not checked."""

    type: Literal["thinking"]
    thinking: str = ""
    signature: str | None = None
    cache_control: CacheControl = None
    index: int | None = None   # LiteLLM's position of a streamed block


class RedactedThinkingBlockIn(_Strict):
    """Thinking another server encrypted: nothing this model can read, so it is left out of the prompt."""

    type: Literal["redacted_thinking"]
    data: str = ""
    cache_control: CacheControl = None
    index: int | None = None


ThinkingBlocks = list[Annotated[ThinkingBlockIn | RedactedThinkingBlockIn, Field(discriminator="type")]]


class AssistantTurn(_Message):
    """An assistant turn of the history: text, tool calls, and the reasoning that led to them."""

    role: Literal["assistant"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCallInAny] | None = None
    reasoning_content: str | None = None            # the thinking (vLLM / DeepSeek name)
    reasoning: str | None = None                    # the same (OpenRouter / Ollama name)
    thinking_blocks: ThinkingBlocks | None = None   # the same as Anthropic blocks (LiteLLM), read where neither is sent
    # DeepSeek's and Mistral's prefix completion: this last message is the start of the reply, which the
    # generation continues (Aider sends it to resume a reply cut at max_tokens); the reply holds the rest
    prefix: bool | None = None
    # what the openai SDK's message objects carry when a client sends them back unchanged
    refusal: str | None = None
    annotations: list[Any] | None = None
    audio: None = None
    function_call: None = None
    # litellm's Message keeps the reply's fields it does not know (here `reasoning`) in this dict, and its
    # tool loop (`messages.append(response.choices[0].message)`) sends it back: metadata, not the turn's
    provider_specific_fields: dict[str, Any] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts(cls, value: Any) -> Any:
        # the API's assistant content parts are text or refusal; a refusal's words are the turn's text
        return _text_parts_only(refusals_as_text(value, "text"))

    def thinking(self) -> str | None:
        """The turn's reasoning under whichever name the client sent it; readable thinking blocks (LiteLLM
        joins them with newlines into `reasoning_content` itself) where no name is set."""
        if self.reasoning_content is not None:
            return self.reasoning_content
        if self.reasoning is not None:
            return self.reasoning
        texts = [block.thinking for block in self.thinking_blocks or () if isinstance(block, ThinkingBlockIn)]
        return "\n".join(text for text in texts if text) or None


class ToolMessage(_Message):
    role: Literal["tool"]
    content: str | list[TextPart]
    tool_call_id: str


_MESSAGE_TAGS = {"system": "System", "developer": "System", "user": "User", "assistant": "Assistant", "tool": "Tool"}


def _message_tag(value: Any) -> str:
    role = value.get("role") if isinstance(value, dict) else getattr(value, "role", None)
    # an unknown role is reported by the user-message model as an invalid `role`
    return _MESSAGE_TAGS.get(role, "User") if isinstance(role, str) else "User"


ChatMessage = Annotated[
    Union[Annotated[SystemMessage, Tag("System")], Annotated[UserMessage, Tag("User")],
          Annotated[AssistantTurn, Tag("Assistant")], Annotated[ToolMessage, Tag("Tool")]],
    Discriminator(_message_tag),
]


class StreamOptions(_Strict):
    include_usage: bool = False
    include_obfuscation: bool | None = None  # OpenAI option; we never pad, so it is harmless
    # vLLM's: with include_usage, every chunk carries the usage so far (not only the last, empty one)
    continuous_usage_stats: bool | None = None

    def continuous(self) -> bool:
        return bool(self.include_usage and self.continuous_usage_stats)


class JsonSchemaFormat(_Strict):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    name: str = Field("response", pattern=TOOL_NAME)
    description: str | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None



class TextFormat(_Strict):
    type: Literal["text"]


class JsonObjectFormat(_Strict):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    type: Literal["json_object"]
    # llama.cpp's server, Together and Fireworks take a schema here (instructor's JSON_SCHEMA mode sends
    # it): the object is then decoded against it, as json_schema would be
    schema_: dict[str, Any] | None = Field(None, alias="schema")


class JsonSchemaResponseFormat(_Strict):
    type: Literal["json_schema"]
    json_schema: JsonSchemaFormat


_FORMAT_TAGS = {"text": "Text", "json_object": "JsonObject", "json_schema": "JsonSchema"}


class UnknownFormat(_Strict):
    """A response_format of a type there is none of (Ollama's "json", a typo), which was read as a malformed
    "text" format ("Input should be 'text'"): a 400 naming the type and the ones there are, as OpenAI's."""

    type: str

    @field_validator("type")
    @classmethod
    def _refuse(cls, value: str) -> str:
        raise ValueError(f"response_format type {value!r} is not supported; supported: {', '.join(_FORMAT_TAGS)}")

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        return {"not": {}}   # accepts nothing: /openapi.json lists only the formats there are


def _format_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return _FORMAT_TAGS.get(kind, "Unknown") if isinstance(kind, str) else "Text"


ResponseFormat = Annotated[
    Union[Annotated[TextFormat, Tag("Text")], Annotated[JsonObjectFormat, Tag("JsonObject")],
          Annotated[JsonSchemaResponseFormat, Tag("JsonSchema")], Annotated[UnknownFormat, Tag("Unknown")]],
    Discriminator(_format_tag),
]


Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
MAX_LOGIT_BIAS = 1024   # entries; OpenAI's own limit is lower, a vocabulary-wide ban belongs in a grammar


def _logit_bias(value: Any) -> Any:
    """OpenAI's logit_bias: token ids (as JSON object keys, so strings of digits) to values in [-100, 100]."""
    if not isinstance(value, dict):
        return value
    if len(value) > MAX_LOGIT_BIAS:
        raise ValueError(f"logit_bias may hold at most {MAX_LOGIT_BIAS} entries")
    for token in value:
        if not (isinstance(token, str) and token.isascii() and token.isdigit()):
            raise ValueError(f"logit_bias keys are token ids (non-negative integers as strings), not {token!r}")
    return value


LogitBias = Annotated[dict[str, Annotated[float, Field(ge=-100.0, le=100.0)]], BeforeValidator(_logit_bias)]


def neutral_only(default: Any, why: str) -> AfterValidator:
    """A vLLM field for a sampler or search not run here: null and its neutral value (what clients that write
    out every field send: LangChain's VLLMOpenAI sends use_beam_search false) are accepted, anything else is a
    400 saying `why`."""
    def check(value: Any) -> Any:
        if value is not None and value != default:
            raise ValueError(f"{why} (send {json.dumps(default)} or leave it out)")
        return value
    return AfterValidator(check)


class StructuredOutputs(_Strict):
    """vLLM's structured_outputs: one constraint on the reply, decoded by the same grammar machinery as
    response_format (llguidance), so every engine stays lossless under it."""

    json_: dict[str, Any] | str | None = Field(None, alias="json")   # a JSON schema (or its text)
    regex: str | None = None
    choice: Annotated[list[str], Field(min_length=1)] | None = None
    grammar: str | None = None                                        # EBNF / GBNF / Lark
    json_object: bool | None = None


def _with_ollama_options(data: Any) -> Any:
    """Before validation of a chat or text completion: Ollama's `options` object (clients that speak Ollama send
    it here too) read as the sampling fields it stands for (gateway.http.ollama_options); a field given at the
    top level wins. An option not run here is a 400 naming it."""
    if not isinstance(data, dict) or "options" not in data:
        return data
    if data["options"] is None:   # null: no options
        return {name: value for name, value in data.items() if name != "options"}
    if not isinstance(data["options"], dict):
        raise ValueError("options: must be an object (Ollama's options) or null")
    from .ollama_options import OllamaOptions, option_fields

    try:
        options = OllamaOptions.model_validate(data["options"])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"options.{where}: {first['msg']} (Ollama's options read here: temperature, top_p, "
                         "top_k, min_p, seed, num_predict, stop, repeat_penalty, presence_penalty, "
                         "frequency_penalty, and Ollama's runtime knobs, ignored)") from None
    fields = option_fields(options)
    if "max_tokens" in fields and data.get("max_completion_tokens") is not None:
        del fields["max_tokens"]
    rest = {name: value for name, value in data.items() if name != "options"}
    return {**fields, **{name: value for name, value in rest.items() if value is not None or name not in fields}}


class _SamplingFields(_Strict):
    """Fields chat and text completions share."""

    @model_validator(mode="before")
    @classmethod
    def _ollama_options(cls, data: Any) -> Any:
        return _with_ollama_options(data)

    model: str | None = None
    max_tokens: PositiveInt32 | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)   # 0: the most likely token alone
    top_k: Annotated[int, Field(ge=-1, le=INT32_MAX), BeforeValidator(_whole_number)] | None = None  # 0/-1: off
    min_p: float | None = Field(None, ge=0.0, lt=1.0)   # the sampler needs p_max * min_p < p_max
    # OpenAI's range (int64: negative seeds too; llama.cpp users send -1); the generator reads it as 64-bit unsigned
    seed: Annotated[int, Field(ge=-2**63, le=2**63 - 1), BeforeValidator(_whole_number)] | None = None
    stop: str | list[str] | None = None
    stream: Stream = False
    stream_options: StreamOptions | None = None
    engine: str | None = None                # Switchyard: raw | mtp | ddtree | auto
    # vLLM's field: higher runs first when requests wait for a running slot (also X-Switchyard-Priority)
    priority: Annotated[int, Field(ge=-1000, le=1000), BeforeValidator(_whole_number)] | None = None
    n: Annotated[int, Field(ge=1, le=INT32_MAX), BeforeValidator(_whole_number)] | None = None  # capped by the server
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0)   # vLLM / mlx-lm extension; 1 = off
    logit_bias: LogitBias | None = None   # token ids of this model's tokenizer (an id past its vocabulary: 400)
    # vLLM's: no end (EOS, stop_token_ids) before this many tokens, banned in the target's logits
    min_tokens: NonNegativeInt | None = None
    # vLLM's: these token ids end the reply as EOS does (not in its text); EOS does not, with ignore_eos
    stop_token_ids: Annotated[list[NonNegativeInt], Field(max_length=MAX_LOGIT_BIAS)] \
        | None = None
    ignore_eos: bool | None = None
    # llama.cpp's (and Ollama's): the repetition penalty reads the last this many tokens of prompt + reply only;
    # -1: all of them, 0: no repetition penalty
    repeat_last_n: RepeatLastN | None = None
    # vLLM's: only these token ids may be sampled; these words are never written
    allowed_token_ids: Annotated[list[NonNegativeInt], Field(min_length=1)] | None = None
    bad_words: Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=MAX_LOGIT_BIAS)] | None = None
    # vLLM's: only the prompt's last k tokens are read (left truncation); -1: the last context-length tokens
    truncate_prompt_tokens: Annotated[Literal[-1] | Annotated[int, Field(ge=1, le=INT32_MAX)],
                                      BeforeValidator(_whole_number)] | None = None
    # vLLM's: the prompt's own tokens scored, each with this many likeliest alternatives (not streamed)
    prompt_logprobs: Annotated[int, Field(ge=0, le=20), BeforeValidator(_whole_number)] | None = None
    skip_special_tokens: bool | None = None   # vLLM's (default true): special tokens are left out of the text
    # vLLM's: spaces between special tokens in the text; a fast tokenizer (every model here) writes none either way
    spaces_between_special_tokens: bool | None = None
    # vLLM's structured output (older guided_* fields and the newer structured_outputs): at most one
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: Annotated[list[str], Field(min_length=1)] | None = None
    guided_grammar: str | None = None
    guided_decoding_backend: str | None = None   # which library vLLM compiles with: llguidance here, any name taken
    structured_outputs: StructuredOutputs | None = None
    # vLLM's fields for what is not run here, at their neutral values only
    use_beam_search: Annotated[bool | None, neutral_only(False, "beam search is not supported (replies are sampled)")] \
        = None
    length_penalty: Annotated[float | None, neutral_only(1.0, "length_penalty applies to beam search, which is not "
                                                         "supported")] = None
    typical_p: Annotated[float | None, neutral_only(1.0, "typical_p (locally typical sampling) is not supported; "
                                                    "top_p, top_k and min_p are")] = None
    include_stop_str_in_output: Annotated[bool | None, neutral_only(False, "include_stop_str_in_output is not "
                                                                    "supported (a stop string is never part of the "
                                                                    "text)")] = None
    # OpenAI fields accepted when harmless, rejected (gateway.http.request_spec) when they would change the result.
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: CacheRetention = None
    prompt_cache_options: dict[str, Any] | None = None


TopLogprobs = Annotated[int, Field(ge=0, le=20), BeforeValidator(_whole_number)]
# every level the openai SDK's ReasoningEffort names ("xhigh" and "max" too: Codex sends them)
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


# Chat fields asking for what a text model with no hosted tools cannot give: only null is accepted
UNSUPPORTED_OUTPUTS = {
    "audio": "this is a text-only model (send modalities [\"text\"] or leave audio out)",
    "web_search_options": "this model has no web search (no hosted tools here: give the client a search tool)",
    "moderation": "no moderation runs on this server (moderate on the client's side)",
}


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: PositiveInt32 | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None
    tools: list[ChatTool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None   # vLLM / SGLang: e.g. {"enable_thinking": false}
    # vLLM's: at most this many tokens of thinking, then the block is closed (Anthropic's budget_tokens comes here)
    thinking_token_budget: NonNegativeInt | None = None
    reasoning_effort: ReasoningEffort | None = None
    include_reasoning: bool | None = None   # vLLM's: false leaves reasoning_content / reasoning out of the reply
    # vLLM's template switches: the generation prompt (a new assistant turn) is always added, unless
    # continue_final_message continues the last assistant message (as its `prefix: true` does)
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    # OpenAI hints that cannot change what a text model returns here: the output is text anyway, a
    # predicted output only speeds OpenAI's decoding up, and verbosity is accepted as on /v1/responses
    modalities: list[Literal["text"]] | None = None
    prediction: dict[str, Any] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    functions: list[Any] | None = None         # deprecated by OpenAI: rejected with a pointer to `tools`
    function_call: Any = None
    # what this model cannot do, as OpenAI answers a model without them: null (clients that write out every
    # optional field send it) is accepted, anything else is a 400 naming the parameter (request_spec)
    audio: Any = None
    web_search_options: Any = None
    moderation: Any = None

    def custom_tool_names(self) -> frozenset[str]:
        """The tools whose calls come back as custom calls."""
        return frozenset(t.custom.name for t in self.tools or () if isinstance(t, ChatCustomTool))


TokenId = Annotated[int, Field(ge=0, le=INT32_MAX)]
TokenIds = Annotated[list[TokenId], Field(min_length=1)]


def _token_ids(value: Any) -> list[int] | None:
    """The list as token ids (whole floats read as ints, as everywhere), or None when it is not one."""
    if not isinstance(value, list) or not value:
        return None
    ids = [_whole_number(t) for t in value]
    if all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= INT32_MAX for t in ids):
        return ids
    return None


def texts_or_token_ids(name: str) -> Callable[[Any], Any]:
    """OpenAI's four shapes of a prompt (or an embedding's input), checked here so that a malformed one is one
    400 in words (the union's own error names whichever branch failed last): a string, strings, token ids,
    lists of token ids."""
    def check(value: Any) -> Any:
        if isinstance(value, str) or not isinstance(value, list):
            return value
        if not value:
            raise ValueError(f"{name} must not be an empty list")
        if all(isinstance(item, str) for item in value):
            return value
        ids = _token_ids(value)
        if ids is not None:
            return ids
        batch = [_token_ids(item) for item in value]
        if all(item is not None for item in batch):
            return batch
        raise ValueError(f"{name} must be a string, a list of strings, a list of token ids (non-negative integers) "
                         "or a list of non-empty lists of token ids")
    return check


class CompletionRequest(_SamplingFields):
    # several prompts (a list of strings or of token-id lists, as LangChain's batch sends them): one choice
    # per prompt (times n), in order; a list of ints is one prompt, already tokenized
    prompt: Annotated[str | list[str] | TokenIds | list[TokenIds], BeforeValidator(texts_or_token_ids("prompt"))]
    logprobs: Annotated[int, Field(ge=0, le=5), BeforeValidator(_whole_number)] | None = None  # legacy: top-N
    # 0 generates nothing: with echo, to read the prompt back scored (OpenAI's legacy scoring call)
    max_tokens: NonNegativeInt | None = None
    echo: bool | None = None
    suffix: str | None = None
    best_of: Int | None = None


# ---- responses ----


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0   # prompt tokens restored from the prefix cache


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int = 0   # completion tokens inside the thinking block


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None


class FunctionCallOut(BaseModel):
    name: str
    arguments: str


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallOut


class CustomCallOut(BaseModel):
    name: str
    input: str


class CustomToolCallOut(BaseModel):
    """A call of a custom tool, as OpenAI returns one."""

    id: str
    type: Literal["custom"] = "custom"
    custom: CustomCallOut


class TopLogprobOut(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprobOut(TopLogprobOut):
    top_logprobs: list[TopLogprobOut]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprobOut] | None


class PromptLogprobOut(BaseModel):
    """vLLM's prompt_logprobs entry of one token (keyed by its id): its log-probability, rank and text."""

    logprob: float
    rank: int
    decoded_token: str


# vLLM's prompt_logprobs: per prompt token, null for the first (nothing precedes it), then the token and the
# likeliest alternatives by token id
PromptLogprobsOut = list[dict[str, PromptLogprobOut] | None]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | None = None   # the thinking, under both names clients read
    reasoning: str | None = None
    tool_calls: list[ToolCallOut | CustomToolCallOut] | None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str | None = None
    prompt_logprobs: PromptLogprobsOut | None = None   # vLLM's, only when asked


class FunctionCallDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(BaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta


class CustomToolCallDelta(BaseModel):
    """A custom tool's call in a stream: whole, as every call is streamed here."""

    index: int
    id: str
    type: Literal["custom"] = "custom"
    custom: CustomCallOut


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallDelta | CustomToolCallDelta] | None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class CompletionLogprobs(BaseModel):
    """The legacy completions shape: parallel lists per token."""

    tokens: list[str]
    token_logprobs: list[float | None]   # null: an echoed prompt's first token (nothing precedes it)
    top_logprobs: list[dict[str, float] | None] | None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None = None
    logprobs: CompletionLogprobs | None = None
    prompt_logprobs: PromptLogprobsOut | None = None   # vLLM's, only when asked


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
    """One served name, as OpenAI's and Anthropic's model objects both read it (the anthropic SDK's
    ModelInfo requires type, display_name and created_at), with the context window agents size
    their compaction on (Anthropic's max_input_tokens / max_tokens, vLLM's max_model_len)."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "switchyard"
    type: Literal["model"] = "model"
    display_name: str
    created_at: str                 # RFC 3339, the same instant as `created`
    lifecycle: Literal["active"] = "active"
    max_model_len: int
    max_input_tokens: int           # the longest prompt: one position stays for the reply
    max_tokens: int                 # the largest max_tokens a request may ask for


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
    # Anthropic's paging: the whole list is one page
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None


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
