"""Turn a validated OpenAI request into what the worker runs (RequestSpec); reject what we cannot honour."""

from __future__ import annotations

import functools
import json
from typing import Any

from contracts.names import forces_tool_call
from contracts.request_text import from_messages, from_prompt, reply_format, tools_text
from contracts.sampling import SEEDS, SamplingParams
from gateway.config import GatewayConfig
from gateway.worker.spec import Prompt, RequestSpec

from .errors import APIError, bad_request
from .schemas import (
    UNSUPPORTED_OUTPUTS,
    AllowedToolChoice,
    AssistantTurn,
    ChatCompletionRequest,
    ChatCustomTool,
    ChatMessage,
    CompletionRequest,
    JsonObjectFormat,
    JsonSchemaResponseFormat,
    NamedCustomToolChoice,
    NamedToolChoice,
    ResponseFormat,
    ToolMessage,
    _SamplingFields,
)

AUTO = "auto"
# reasoning_effort -> the template's thinking switch (Qwen3.5/3.6 templates have on/off, no levels)
THINKING_BY_EFFORT = {"none": False, "minimal": False, "low": True, "medium": True, "high": True, "xhigh": True,
                      "max": True}


def _reject_common(req: _SamplingFields, config: GatewayConfig) -> None:
    if req.n is not None and req.n > config.max_choices:
        raise bad_request(f"n must be at most {config.max_choices} on this server (got {req.n}).", param="n",
                          code="invalid_value")
    if req.prompt_logprobs is not None and req.stream:   # vLLM's 400 too
        raise bad_request("prompt_logprobs are not available when stream is true (send stream: false).",
                          param="prompt_logprobs", code="conflicting_constraints")


# apply_chat_template's own arguments, not template variables: `chat_template` would run the client's
# Jinja on the model's worker thread (a nested loop stalls every request; the deadline is checked only
# between engine steps), the rest are set by the server (tools, the generation prompt, text out)
TEMPLATE_ARGUMENTS = ("chat_template", "conversation", "messages", "tools", "documents", "add_generation_prompt",
                      "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors",
                      "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs")


def _reject_chat(req: ChatCompletionRequest, config: GatewayConfig) -> None:
    _reject_common(req, config)
    for name in req.chat_template_kwargs or {}:
        if name in TEMPLATE_ARGUMENTS:
            raise bad_request(f"chat_template_kwargs may not set {name!r}: it is an argument of the template call, "
                              "not a template variable (send e.g. enable_thinking).",
                              param=f"chat_template_kwargs.{name}", code="unsupported_parameter")
    for name in ("functions", "function_call"):
        if getattr(req, name) not in (None, []):
            raise bad_request(f"{name} is deprecated by OpenAI and not supported; send `tools` / `tool_choice`.",
                              param=name, code="unsupported_parameter")
    for name, why in UNSUPPORTED_OUTPUTS.items():
        if getattr(req, name) is not None:
            raise bad_request(f"{name} is not supported: {why}.", param=name, code="unsupported_parameter")
    if req.logprobs is False and req.top_logprobs:   # alternatives of tokens whose logprobs were declined: OpenAI's 400
        raise bad_request("top_logprobs needs logprobs: true (logprobs is false).", param="top_logprobs",
                          code="conflicting_constraints")
    if forces_tool_call(req.tool_choice) and not req.tools:
        raise bad_request("a forced tool_choice needs `tools`.", param="tool_choice")
    names = [tool.function.name for tool in req.tools or []]
    if len(set(names)) != len(names):
        raise bad_request("tool function names must be unique.", param="tools", code="duplicate_tool_name")
    if isinstance(req.tool_choice, NamedToolChoice):
        chosen = req.tool_choice.function.name
        if chosen not in names:
            raise bad_request(f"tool_choice names {chosen!r}, which is not among the tools ({', '.join(names)}).",
                              param="tool_choice", code="unknown_tool")
    if forces_tool_call(req.tool_choice):
        _check_forced_tools(req)


def _reject_completion(req: CompletionRequest, config: GatewayConfig) -> None:
    _reject_common(req, config)
    _check_min_tokens(req, req.max_tokens, "max_tokens")
    if req.max_tokens == 0 and not req.echo:
        raise bad_request("max_tokens 0 generates nothing: it is taken only with echo: true (the prompt read back, "
                          "scored with logprobs).", param="max_tokens", code="invalid_value")
    n = req.n or 1
    if req.best_of is not None and req.best_of < n:
        raise bad_request(f"best_of must be at least n ({n}); got {req.best_of}.", param="best_of",
                          code="conflicting_constraints")
    if best_of(req) > config.max_choices:
        raise bad_request(f"best_of must be at most {config.max_choices} on this server (got {req.best_of}).",
                          param="best_of", code="invalid_value")
    if req.echo and req.truncate_prompt_tokens is not None:
        raise bad_request("echo reads the prompt back as sent; it cannot be combined with truncate_prompt_tokens.",
                          param="truncate_prompt_tokens", code="conflicting_constraints")
    if best_of(req) > n and req.stream:
        raise bad_request("best_of greater than n cannot be streamed (the best choices are known only when all are "
                          "done).", param="best_of", code="conflicting_constraints")


def _check_min_tokens(req: _SamplingFields, max_tokens: int | None, param: str) -> None:
    if req.min_tokens and max_tokens is not None and req.min_tokens > max_tokens:   # vLLM's 400 too
        raise bad_request(f"min_tokens ({req.min_tokens}) must be at most {param} ({max_tokens}).",
                          param="min_tokens", code="conflicting_constraints")


def best_of(req: CompletionRequest) -> int:
    """How many choices are generated per prompt: best_of, or n where it is absent (best_of == n is plain n)."""
    return max(req.best_of or 1, req.n or 1)


def _stop_list(stop: str | list[str] | None, config: GatewayConfig) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > config.max_stop_sequences:
        raise bad_request(f"At most {config.max_stop_sequences} stop sequences are allowed.", param="stop")
    if any(s == "" for s in stops):
        raise bad_request("Stop sequences must not be empty strings.", param="stop")
    if any(len(s) > config.max_stop_chars for s in stops):
        raise bad_request(f"Stop sequences may be at most {config.max_stop_chars} characters long.", param="stop")
    return tuple(stops)


def _max_tokens(asked: int | None, param: str, config: GatewayConfig) -> int:
    """The request's max_tokens (over the server's cap -> 400; over the context -> 400 from the
    runtime), or the default, which the worker shortens to the room left in the context."""
    if asked is None:
        return min(config.default_max_tokens, config.max_tokens_limit or config.default_max_tokens)
    if config.max_tokens_limit is not None and asked > config.max_tokens_limit:
        raise bad_request(f"{param} must be at most {config.max_tokens_limit} on this server (got {asked}).",
                          param=param, code="invalid_value")
    return asked


def compact(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with llguidance's option to write it compactly (unless the schema's own x-guidance says)."""
    guidance = schema.get("x-guidance")
    return {**schema, "x-guidance": {"whitespace_flexible": False, **(guidance if isinstance(guidance, dict) else {})}}


def json_grammar(schema: dict[str, Any], param: str = "response_format.json_schema.schema",
                 what: str = "response_format") -> str:
    """An llguidance grammar for JSON matching `schema`, written compactly: free whitespace would let
    a sampled reply wander in blank space until max_tokens. A schema llguidance cannot compile is a
    400 here, at the door, not an error mid-generation."""
    try:
        text = json.dumps(compact(schema))
        grammar, problem = (_compiled if len(text) <= CACHED_SCHEMA_CHARS else _compiled.__wrapped__)(text)
    except (TypeError, ValueError) as exc:
        grammar, problem = "", str(exc)
    if problem:
        raise bad_request(f"{what}: not a usable JSON schema: {problem}", param=param, code="invalid_json_schema")
    return grammar


# Schemas up to this size are cached (tool schemas are a few KiB): 256 entries then hold at most
# ~32 MiB, where bodies of up to max_body_bytes each could pin gigabytes.
CACHED_SCHEMA_CHARS = 64 * 1024


@functools.lru_cache(maxsize=256)
def _compiled(schema_json: str) -> tuple[str, str]:
    """(grammar, problem) of a JSON schema's text. Cached: agents resend the same tools (each compiled
    under a forced tool_choice) and clients the same response_format every turn."""
    import llguidance

    try:
        grammar = llguidance.grammar_from("json_schema", schema_json)
        return grammar, llguidance.LLMatcher.validate_grammar(grammar)
    except (TypeError, ValueError) as exc:
        return "", str(exc)


def _json_text(value: dict[str, Any] | str, param: str) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        schema = json.loads(value)
    except ValueError:
        schema = None
    if not isinstance(schema, dict):
        raise bad_request(f"{param}: not a JSON schema (an object, or its JSON text).", param=param,
                          code="invalid_json_schema")
    return schema


def _guided(req: _SamplingFields) -> list[tuple[str, Any, str]]:
    """vLLM's structured outputs the request asks for (guided_* and structured_outputs' fields), as (kind,
    value, param): empty when none is."""
    asked: list[tuple[str, Any, str]] = []
    for kind, value, param in (("json", req.guided_json, "guided_json"), ("regex", req.guided_regex, "guided_regex"),
                               ("choice", req.guided_choice, "guided_choice"),
                               ("grammar", req.guided_grammar, "guided_grammar")):
        if value is not None:
            asked.append((kind, value, param))
    outputs = req.structured_outputs
    if outputs is not None:
        for kind, value in (("json", outputs.json_), ("regex", outputs.regex), ("choice", outputs.choice),
                            ("grammar", outputs.grammar)):
            if value is not None:
                asked.append((kind, value, f"structured_outputs.{kind}"))
        if outputs.json_object:
            asked.append(("json", {"type": "object"}, "structured_outputs.json_object"))
    return asked


def guided_grammar(req: _SamplingFields) -> str | None:
    """The grammar of vLLM's structured output fields (guided_json / _regex / _choice / _grammar, or
    structured_outputs' json / regex / choice / grammar / json_object), None when none is set; more than one
    is a 400, and so is one the constraint library cannot compile."""
    asked = _guided(req)
    if not asked:
        return None
    if len(asked) > 1:
        raise bad_request(f"only one structured output may be asked for; got {', '.join(a[2] for a in asked)}.",
                          param=asked[1][2], code="conflicting_constraints")
    kind, value, param = asked[0]
    if kind == "json":
        return json_grammar(_json_text(value, param), param=param, what=param)
    import llguidance

    try:
        grammar = llguidance.grammar_from(kind, json.dumps(value) if kind == "choice" else value)
        problem = llguidance.LLMatcher.validate_grammar(grammar)
    except (TypeError, ValueError) as exc:
        problem = str(exc)
    if problem:
        raise bad_request(f"{param}: not a usable {kind}: {problem}", param=param, code="invalid_grammar")
    return grammar


def _check_forced_tools(req: ChatCompletionRequest) -> None:
    """A forced call's arguments are decoded against the callable tools' `parameters` (the engine
    writes the grammar in the model's tool-call syntax): a schema the constraint library cannot
    compile is a 400 here, off the model's worker."""
    named = req.tool_choice.function.name if isinstance(req.tool_choice, NamedToolChoice) else None
    for index, tool in enumerate(req.tools or []):
        if named is None or tool.function.name == named:
            json_grammar(tool.function.parameters or {}, param=f"tools[{index}].function.parameters",
                         what=f"tool {tool.function.name!r}: parameters")


def _answer_schema(response_format: ResponseFormat | None) -> tuple[dict[str, Any], str] | None:
    """The JSON schema a response_format holds the answer to (any object, or the given schema), and its param."""
    if isinstance(response_format, JsonSchemaResponseFormat):
        return response_format.json_schema.schema_ or {}, "response_format.json_schema.schema"
    if isinstance(response_format, JsonObjectFormat):
        return response_format.schema_ or {"type": "object"}, "response_format.schema"
    return None


def grammar_for(response_format: ResponseFormat | None) -> str | None:
    """The grammar of a JSON response_format: any object, or the given schema."""
    answer = _answer_schema(response_format)
    return json_grammar(*answer) if answer is not None else None


def _sampling(req: _SamplingFields, max_tokens: int, config: GatewayConfig, *, logprobs: bool = False,
              top_logprobs: int = 0, grammar: str | None = None, thinking_budget: int | None = None) -> SamplingParams:
    return SamplingParams(
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=0 if req.top_k == -1 else req.top_k,
        min_p=req.min_p,
        seed=None if req.seed is None else req.seed % SEEDS,   # a negative seed: its 64-bit two's complement
        max_tokens=max_tokens,
        stop=_stop_list(req.stop, config),
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=1.0 if req.repeat_last_n == 0 else req.repetition_penalty or 1.0,   # 0: no penalty
        repetition_window=max(req.repeat_last_n or 0, 0),
        logit_bias=tuple((int(token), value) for token, value in (req.logit_bias or {}).items()),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        grammar=grammar,
        min_tokens=req.min_tokens or 0,
        stop_token_ids=tuple(req.stop_token_ids or ()),
        ignore_eos=bool(req.ignore_eos),
        skip_special_tokens=req.skip_special_tokens is not False,
        allowed_token_ids=tuple(req.allowed_token_ids or ()),
        bad_words=tuple(req.bad_words or ()),
        thinking_budget=thinking_budget,
    )


def header_priority(value: str | None) -> int | None:
    """X-Switchyard-Priority: an integer in [-1000, 1000] (400 otherwise); None when absent."""
    if value is None:
        return None
    try:
        priority = int(value.strip())
    except ValueError:
        priority = None
    if priority is None or not -1000 <= priority <= 1000:
        raise bad_request("X-Switchyard-Priority must be an integer from -1000 to 1000.", param="priority")
    return priority


def resolve_engine(body_engine: str | None, header_engine: str | None, loaded: tuple[str, ...]) -> str | None:
    """The forced engine (body field wins over the header), None for auto. Each one given must name
    auto or a loaded engine (unknown/unloaded -> 400), even when the other one wins."""
    header = _engine_name(header_engine, loaded)
    body = _engine_name(body_engine, loaded)
    return body if body_engine is not None else header


def _engine_name(given: str | None, loaded: tuple[str, ...]) -> str | None:
    if given is None:
        return None
    name = given.strip(" \t").lower()  # as /openapi.json documents it
    if name in ("", AUTO):
        return None
    if name not in loaded:
        choices = ", ".join([AUTO, *loaded])
        raise APIError(400, f"Engine {name!r} is not loaded; choose one of: {choices}.", param="engine", code="engine_not_loaded")
    return name


def template_message(message: ChatMessage) -> dict[str, Any]:
    """One message as chat templates read it: developer -> system, tool calls with their arguments,
    the tool result's call id, and the assistant's reasoning under the name Qwen's template uses."""
    out: dict[str, Any] = {"role": "system" if message.role == "developer" else message.role,
                           "content": message.text()}
    if message.name is not None:
        out["name"] = message.name
    if isinstance(message, ToolMessage):
        out["tool_call_id"] = message.tool_call_id
    if isinstance(message, AssistantTurn):
        if message.tool_calls:
            out["tool_calls"] = [{"id": call.id, "type": "function",
                                  "function": {"name": call.function.name, "arguments": call.function.arguments}}
                                 for call in message.tool_calls]
        reasoning = message.thinking()
        if reasoning:
            out["reasoning_content"] = reasoning
    return out


def one_system_message(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """System and developer messages joined, in order, into one leading system message: chat templates
    (Qwen's among them) refuse a system message anywhere but first, while agents send instructions
    plus developer notes later in the conversation."""
    system = [m for m in messages if m["role"] == "system"]
    if len(system) <= 1 and (not system or messages[0] is system[0]):
        return messages
    joined = {"role": "system", "content": "\n\n".join(m["content"] for m in system if m["content"])}
    return [joined, *(m for m in messages if m["role"] != "system")]




def _template_kwargs(req: ChatCompletionRequest) -> dict[str, Any]:
    kwargs = dict(req.chat_template_kwargs or {})
    if req.reasoning_effort is not None:
        kwargs.setdefault("enable_thinking", THINKING_BY_EFFORT[req.reasoning_effort])
        kwargs.setdefault("reasoning_effort", req.reasoning_effort)   # for templates that read it
    if req.response_format is not None and req.response_format.type != "text" or _guided(req):
        kwargs.setdefault("enable_thinking", False)   # the constraint shapes the reply from its first token
    return kwargs


def _prefilled(req: ChatCompletionRequest) -> tuple[list[ChatMessage], bool]:
    """The messages to render, and whether the reply continues the last one (an assistant message
    with `prefix: true`). An empty prefix starts nothing: the reply is a new turn, as without it."""
    marked = [i for i, m in enumerate(req.messages) if isinstance(m, AssistantTurn) and m.prefix]
    if req.continue_final_message:   # vLLM's way to say the last message is the reply's start
        if req.add_generation_prompt:
            raise bad_request("continue_final_message and add_generation_prompt cannot both be true (the reply "
                              "either continues the last message or starts a new turn).",
                              param="continue_final_message", code="conflicting_constraints")
        if not isinstance(req.messages[-1], AssistantTurn):
            raise bad_request("continue_final_message needs the last message to be the assistant's.",
                              param="continue_final_message", code="invalid_prefix")
        marked = sorted({*marked, len(req.messages) - 1})
    elif req.add_generation_prompt is False:
        raise bad_request("add_generation_prompt false is not supported: a chat reply is the assistant's turn (to "
                          "continue the last assistant message send continue_final_message true; for raw text use "
                          "/v1/completions).", param="add_generation_prompt", code="unsupported_parameter")
    if not marked:
        return req.messages, False
    last = len(req.messages) - 1
    if marked != [last]:
        raise bad_request("only the last message may be an assistant prefix.", param=f"messages.{marked[0]}.prefix",
                          code="invalid_prefix")
    prefill = req.messages[last]
    if isinstance(prefill, AssistantTurn) and prefill.tool_calls:
        raise bad_request("an assistant prefix is text to continue; it cannot hold tool_calls.",
                          param=f"messages.{last}.tool_calls", code="invalid_prefix")
    if forces_tool_call(req.tool_choice):
        raise bad_request("an assistant prefix cannot be combined with a forced tool_choice (the call would "
                          "have to start where the prefix already stands).", param="tool_choice",
                          code="conflicting_constraints")
    if req.response_format is not None and req.response_format.type != "text":
        raise bad_request("an assistant prefix cannot be combined with a JSON response_format (the JSON would "
                          "have to start where the prefix already stands).", param="response_format",
                          code="conflicting_constraints")
    if not prefill.text().strip():   # templates trim it away: nothing to continue
        return req.messages[:last], False
    return req.messages, True


def _allowed_only(req: ChatCompletionRequest) -> ChatCompletionRequest:
    """An `allowed_tools` tool_choice as the plain request it means: `tools` narrowed to the allowed ones
    (the model is offered only those: a text model cannot be kept from calling a tool it is shown) and
    the mode as tool_choice. A name that is not among `tools` is a 400, as for a named tool_choice."""
    if not isinstance(req.tool_choice, AllowedToolChoice):
        return req
    allowed = req.tool_choice.allowed_tools
    names = {tool.function.name for tool in req.tools or []}
    for choice in allowed.tools:
        if choice.function.name not in names:
            raise bad_request(f"tool_choice.allowed_tools names {choice.function.name!r}, which is not among the "
                              f"tools ({', '.join(sorted(names)) or 'none given'}).", param="tool_choice",
                              code="unknown_tool")
    wanted = {choice.function.name for choice in allowed.tools}
    tools = [tool for tool in req.tools or [] if tool.function.name in wanted]
    return req.model_copy(update={"tools": tools, "tool_choice": allowed.mode})


def _named_custom(choice: NamedCustomToolChoice, customs: frozenset[str], param: str) -> NamedToolChoice:
    if choice.custom.name not in customs:
        raise bad_request(f"{param} names the custom tool {choice.custom.name!r}, which is not among the custom tools "
                          f"({', '.join(sorted(customs)) or 'none given'}).", param="tool_choice", code="unknown_tool")
    return choice.as_function()


def _customs_as_functions(req: ChatCompletionRequest) -> ChatCompletionRequest:
    """Custom tools as the functions the model is offered for them, and a custom tool_choice as the named
    function: what follows reads function tools only (the renderer turns their calls back into custom
    calls). A custom tool_choice naming no custom tool is a 400, as a named function's is."""
    customs = req.custom_tool_names()
    choice = req.tool_choice
    if isinstance(choice, NamedCustomToolChoice):
        choice = _named_custom(choice, customs, "tool_choice")
    elif isinstance(choice, AllowedToolChoice):
        named = [_named_custom(c, customs, "tool_choice.allowed_tools") if isinstance(c, NamedCustomToolChoice)
                 else c for c in choice.allowed_tools.tools]
        choice = choice.model_copy(update={"allowed_tools": choice.allowed_tools.model_copy(update={"tools": named})})
    if not customs and choice is req.tool_choice:
        return req
    tools = [t.as_function() if isinstance(t, ChatCustomTool) else t for t in req.tools or ()]
    return req.model_copy(update={"tools": tools or req.tools, "tool_choice": choice})


def chat_spec(req: ChatCompletionRequest, forced_engine: str | None, config: GatewayConfig) -> RequestSpec:
    req = _allowed_only(_customs_as_functions(req))
    _reject_chat(req, config)
    _check_min_tokens(req, req.max_completion_tokens or req.max_tokens,
                      "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens")
    if len(req.messages) > config.max_messages:
        raise bad_request(f"At most {config.max_messages} messages are allowed per request.", param="messages")
    param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    max_tokens = _max_tokens(req.max_completion_tokens or req.max_tokens, param, config)
    turns, continue_final = _prefilled(req)
    messages = one_system_message([template_message(m) for m in turns])
    tool_choice = req.tool_choice.model_dump() if isinstance(req.tool_choice, NamedToolChoice) else req.tool_choice
    response_format = reply_format(req.response_format.type if req.response_format else None, tool_choice)
    logprobs = bool(req.logprobs or req.top_logprobs)   # asking for alternatives implies the tokens' own
    # a forced call leaves no text for a JSON response_format to shape (OpenAI takes both, as instructor's
    # RESPONSES_TOOLS mode and openai-agents' output_type with tool_choice "required" send them): the call's
    # grammar decodes the reply; the schema is still checked
    forcing = forces_tool_call(tool_choice)
    grammar = grammar_for(req.response_format)
    guided = guided_grammar(req)
    if guided is not None and (grammar is not None or forcing):
        raise bad_request("vLLM's structured output cannot be combined with a JSON response_format or a forced "
                          "tool_choice (each decides the whole reply).", param="response_format" if grammar else
                          "tool_choice", code="conflicting_constraints")
    grammar = grammar if guided is None else guided
    params = _sampling(req, max_tokens, config, logprobs=logprobs, top_logprobs=req.top_logprobs or 0,
                       grammar=None if forcing else grammar, thinking_budget=req.thinking_token_budget)
    # tools the model may call beside a JSON answer: the reply is that JSON or a call, a grammar the engine
    # writes in the template's call syntax (params.grammar, the JSON alone, stays for a syntax it cannot)
    answer = _answer_schema(req.response_format)
    beside_tools = answer is not None and bool(req.tools) and tool_choice != "none" and not forcing
    answer_schema = compact(answer[0]) if beside_tools else None
    tools = [tool.model_dump(exclude_none=True) for tool in req.tools] if req.tools else None
    return RequestSpec(
        messages=messages,
        prompts=(),
        params=params,
        forced_engine=forced_engine,
        text=from_messages(messages, response_format, tools_text(tools, tool_choice)),
        max_tokens_defaulted=req.max_completion_tokens is None and req.max_tokens is None,
        tools=tools,
        tool_choice=tool_choice,
        answer_schema=answer_schema,
        template_kwargs=_template_kwargs(req),
        n=req.n or 1,
        parallel_tool_calls=req.parallel_tool_calls is not False,
        priority=req.priority or 0,
        continue_final=continue_final,
        truncate_prompt=req.truncate_prompt_tokens,
        prompt_logprobs=req.prompt_logprobs,
    )


def _prompts(prompt: str | list[str] | list[int] | list[list[int]], config: GatewayConfig) -> tuple[Prompt, ...]:
    """The request's prompts in OpenAI's order: a string or a list of ints is one prompt, a list of strings or
    of token-id lists is one prompt each. An empty string is a prompt (the backend starts it from its start of
    text); an empty list of ids is refused by the schema."""
    if isinstance(prompt, str) or isinstance(prompt[0], int):
        prompts: list[Any] = [prompt]
    else:
        prompts = list(prompt)
    if len(prompts) > config.max_prompts:
        raise bad_request(f"At most {config.max_prompts} prompts are allowed per request (got {len(prompts)}).",
                          param="prompt", code="invalid_value")
    return tuple(p if isinstance(p, str) else tuple(p) for p in prompts)


def completion_spec(req: CompletionRequest, forced_engine: str | None, config: GatewayConfig) -> RequestSpec:
    _reject_completion(req, config)
    prompts = _prompts(req.prompt, config)
    ranked = best_of(req) > (req.n or 1)   # the best are picked by their tokens' log-probabilities
    logprobs = req.logprobs is not None or ranked
    # one route for the batch, on its first text prompt's words (a batch is alike; token ids have none to read)
    text = next((p for p in prompts if isinstance(p, str)), "")
    return RequestSpec(
        messages=None,
        prompts=prompts,
        params=_sampling(req, _max_tokens(req.max_tokens, "max_tokens", config), config, logprobs=logprobs,
                         top_logprobs=req.logprobs or 0, grammar=guided_grammar(req)),
        forced_engine=forced_engine,
        text=from_prompt(text),
        max_tokens_defaulted=req.max_tokens is None,
        n=best_of(req),
        priority=req.priority or 0,
        suffix=req.suffix or "",
        score_prompts=bool(req.echo) and req.logprobs is not None,
        truncate_prompt=req.truncate_prompt_tokens,
        prompt_logprobs=req.prompt_logprobs,
    )
