"""Rendering a chat through the model's own template: tools, tool calls and results in the history,
thinking switches, and a tool call forced by tool_choice ("required" or a named function: its
opening ends the prompt, its grammar constrains the rest; engines.forced_call)."""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from pydantic_core import from_json

from contracts.chat import ChatPrompt, ReplyFormat
from contracts.errors import InvalidRequestError
from contracts.names import forces_tool_call

from .forced_call import ForcedCall, answer_or_call, forced_call


# Client text that spells a control token (a file of an LLM project holding "<|im_end|>", a web page with
# "<tool_call>") must reach the model as text: encoded whole, the tokenizer reads it as the token, and with
# it an end of turn, a system turn or a tool call. In the text of system, user and tool messages each such
# string is held as a placeholder while the template renders, then encoded as plain text (_encode). The
# assistant's own turns are left alone: templates read their markers (Qwen's split on "</think>").
_GUARDED_ROLES = ("system", "developer", "user", "tool")
_HOLD_OPEN, _HOLD_CLOSE = "\U000f8000", "\U000f8001"   # private-use characters: never in a template
_HELD = re.compile(f"{_HOLD_OPEN}(\\d+){_HOLD_CLOSE}")


@functools.lru_cache(maxsize=8)
def _markers(tokenizer: Any) -> tuple[str, ...]:
    """The control tokens' strings (added tokens written <...>: <|im_end|>, <think>, <tool_call>, ...),
    longest first. An added token that is a plain word is left to the tokenizer."""
    added = [token for token in tokenizer.get_added_vocab() if token.startswith("<") and token.endswith(">")]
    return tuple(sorted(added, key=len, reverse=True))


def _hold(tokenizer: Any, text: str) -> str:
    for index, marker in enumerate(_markers(tokenizer)):
        if marker in text:
            text = text.replace(marker, f"{_HOLD_OPEN}{index}{_HOLD_CLOSE}")
    return text


def _encode(tokenizer: Any, text: str) -> list[int]:
    """The rendered prompt's tokens, each held marker as plain text: its first character apart, so that the
    tokenizer never matches the whole marker."""
    markers = _markers(tokenizer)
    ids: list[int] = []
    pieces = _HELD.split(text)   # text, marker index, text, ...
    for number, piece in enumerate(pieces):
        if number % 2 == 0:
            ids += tokenizer.encode(piece, add_special_tokens=False) if piece else []
        else:
            marker = markers[int(piece)]
            ids += tokenizer.encode(marker[:1], add_special_tokens=False)
            ids += tokenizer.encode(marker[1:], add_special_tokens=False)
    return ids


def _template_messages(tokenizer: Any, messages: list[dict]) -> list[dict]:
    """Assistant tool calls carry their arguments as JSON strings in the API; templates iterate them
    as mappings (`tool_call.arguments|items`). Control-token strings in client text are held (_hold)."""
    out = []
    for message in messages:
        if message.get("role") in _GUARDED_ROLES and isinstance(message.get("content"), str):
            message = {**message, "content": _hold(tokenizer, message["content"])}
        calls = message.get("tool_calls")
        if calls:
            message = dict(message)
            parsed = []
            for call in calls:
                function = dict(call.get("function", {}))
                function["arguments"] = _arguments(function.get("name"), function.get("arguments"))
                parsed.append({**call, "function": function})
            message["tool_calls"] = parsed
        out.append(message)
    return out


def _arguments(name: Any, arguments: Any) -> Any:
    """A history call's arguments as a mapping. A call that max_tokens cut off comes back with its
    arguments cut too (openai-agents answers it with a tool error and carries on; the OpenAI API takes
    any string): it is read as far as it goes. "" and "null" are a call without arguments; text that is
    no JSON object at all is a 400."""
    if not isinstance(arguments, str):
        return arguments
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as exc:
        problem: Exception = exc
    else:
        if value is None or isinstance(value, dict):
            return value or {}
        # the template iterates them as a mapping
        problem = ValueError("a JSON " + {list: "array", str: "string", bool: "boolean"}.get(type(value), "number"))
    try:
        partial = from_json(arguments, allow_partial="trailing-strings")
    except ValueError:
        partial = None
    if isinstance(partial, dict):
        return partial
    raise InvalidRequestError(f"tool call {name!r}: arguments are not a JSON object ({problem})",
                              param="messages", code="invalid_tool_arguments") from problem


def _ending(continue_final: bool, messages: list[dict], forced: bool) -> dict[str, bool]:
    """How the prompt ends: with the generation prompt (a new assistant turn), or inside the last
    message, an assistant reply the client began (a prefill), which the generation continues."""
    if not continue_final:
        return {"add_generation_prompt": True}
    if not messages or messages[-1].get("role") != "assistant" or not messages[-1].get("content"):
        raise InvalidRequestError("only a final assistant message with text can be continued", param="messages")
    if forced:   # the call would have to start where the client's text already stands
        raise InvalidRequestError("a prefilled assistant reply cannot be combined with a forced tool_choice",
                                  param="tool_choice", code="conflicting_constraints")
    return {"add_generation_prompt": False, "continue_final_message": True}


def render_chat(tokenizer: Any, messages: list[dict], tools: list[dict] | None = None, tool_choice: Any = None,
                template_kwargs: dict[str, Any] | None = None, continue_final: bool = False, *,
                answer_schema: dict[str, Any] | None = None) -> tuple[str, ReplyFormat, str | None]:
    """The prompt text, how to read the reply, and the grammar the reply must follow. tool_choice
    "none" shows the tools but allows no call (chat_prompt bans the call's opening where it is one token;
    a call written anyway ends the reply unreturned: ReplyFormat.refuse_calls); "required" and named
    functions start the reply with the call's opening and constrain the rest to one call
    (engines.forced_call). With tools offered and not forced, `answer_schema` makes the reply that JSON or
    one call (engines.forced_call). `continue_final`: the prompt ends inside the last (assistant) message,
    and the reply continues it."""
    kwargs = dict(template_kwargs or {})
    offered = tools if tools and tool_choice != "none" else None
    shown = _shown_tools(tokenizer, tools, tool_choice)
    forced = offered is not None and forces_tool_call(tool_choice)
    if offered and not tokenizer.has_tool_calling:
        raise InvalidRequestError("this model's chat template has no tool-call format: tools are not supported",
                                  param="tools", code="tools_unsupported")
    ending = _ending(continue_final, messages, forced)
    if forced and tokenizer.has_thinking:
        kwargs.setdefault("enable_thinking", False)   # the call starts the reply, unless thinking is asked for
    try:
        text = tokenizer.apply_chat_template(_template_messages(tokenizer, messages), tools=shown, tokenize=False,
                                             **ending, **kwargs)
    except InvalidRequestError:
        raise
    except Exception as exc:  # jinja errors for shapes the template rejects
        raise InvalidRequestError(f"chat template cannot render these messages: {exc}", param="messages") from exc
    opens_in_reasoning = False
    if tokenizer.has_thinking:
        start, end = text.rfind(tokenizer.think_start), text.rfind(tokenizer.think_end)
        opens_in_reasoning = start > end
    # thinking asked for: the forced call comes after a closed thinking block, not inside the open one
    if forced:
        call = forced_call(tokenizer, list(offered or ()), tool_choice, thinking=opens_in_reasoning)
    elif offered and answer_schema is not None:
        call = ForcedCall("", answer_or_call(tokenizer, offered, answer_schema, thinking=opens_in_reasoning))
    else:
        call = ForcedCall("", None)
    prefix = call.prefix
    reply = ReplyFormat(tools=tuple(shown or ()), parse_tools=shown is not None,
                        refuse_calls=shown is not None and offered is None,
                        opens_in_reasoning=opens_in_reasoning and not prefix, prefix=prefix, continues=continue_final)
    return text + prefix, reply, call.grammar


def _shown_tools(tokenizer: Any, tools: list[dict] | None, tool_choice: Any) -> list[dict] | None:
    """The tools the template renders: every one given, tool_choice "none" too (OpenAI's "none" forbids a
    call, the model still knows the tools), except "none" on a template with no tool-call format, which
    has nothing to show them in."""
    if not tools or (tool_choice == "none" and not tokenizer.has_tool_calling):
        return None
    return tools


def refused_call_tokens(tokenizer: Any, tools: list[dict] | None, tool_choice: Any) -> tuple[int, ...]:
    """The tokens a reply may not hold: under tool_choice "none" with tools shown, the call's opening where it
    is one token (Qwen's <tool_call>), so that no call starts; an opening of several tokens is not banned (a
    call written anyway ends the reply, unreturned: ReplyFormat.refuse_calls)."""
    if tool_choice != "none" or _shown_tools(tokenizer, tools, tool_choice) is None:
        return ()
    ids = tokenizer.encode(tokenizer.tool_call_start, add_special_tokens=False)
    return tuple(ids) if len(ids) == 1 else ()


def _conversation_ids(tokenizer: Any, messages: list[dict], tools: list[dict] | None,
                      template_kwargs: dict[str, Any] | None) -> list[int] | None:
    """`messages` rendered without a generation prompt, as token ids (None: the template refuses)."""
    try:
        text = tokenizer.apply_chat_template(_template_messages(tokenizer, messages), tools=tools, tokenize=False,
                                             add_generation_prompt=False, **dict(template_kwargs or {}))
    except Exception:  # noqa: BLE001 - e.g. a template that refuses to end on this turn: no extra point
        return None
    return _encode(tokenizer, text)


def _point(ids: list[int], head: list[int], length: int) -> tuple[int, ...]:
    """`length` as a snapshot point, if the prompt's tokens really start with `head[:length]` (BPE
    may merge across the seam) and it lies inside the prompt."""
    return (length,) if 0 < length < len(ids) and ids[:length] == head[:length] else ()


def _history_point(tokenizer: Any, ids: list[int], messages: list[dict], tools: list[dict] | None,
                   template_kwargs: dict[str, Any] | None) -> tuple[int, ...]:
    """Where the conversation ends and the generation prompt begins, in tokens."""
    head = _conversation_ids(tokenizer, messages, tools, template_kwargs)
    return _point(ids, head, len(head)) if head is not None else ()


def _system_point(tokenizer: Any, ids: list[int], messages: list[dict], tools: list[dict] | None,
                  template_kwargs: dict[str, Any] | None) -> tuple[int, ...]:
    """Where the system prompt (and the tools the template renders with it) ends, in tokens: the
    common prefix of the system part followed by two different user turns. Requests that share a
    system prompt and tools (an agent's sub-agents, a chat UI's new conversations) share this much."""
    system = []
    for message in messages:
        if message.get("role") != "system":
            break
        system.append(message)
    if not system and not tools:
        return ()
    heads = [_conversation_ids(tokenizer, [*system, {"role": "user", "content": probe}], tools, template_kwargs)
             for probe in ("A", "B")]
    if heads[0] is None or heads[1] is None:
        return ()
    common = 0
    for a, b in zip(*heads):
        if a != b:
            break
        common += 1
    return _point(ids, heads[0], common)


def chat_prompt(tokenizer: Any, messages: list[dict], tools: list[dict] | None = None, tool_choice: Any = None,
                template_kwargs: dict[str, Any] | None = None, continue_final: bool = False, *,
                answer_schema: dict[str, Any] | None = None) -> ChatPrompt:
    text, reply, grammar = render_chat(tokenizer, messages, tools, tool_choice, template_kwargs, continue_final,
                                       answer_schema=answer_schema)
    ids = _encode(tokenizer, text)
    offered = list(reply.tools) or None   # the tools the template was given
    # a continued reply: the conversation ends where the client's unfinished assistant turn begins
    history = messages[:-1] if continue_final else messages
    points = {*_system_point(tokenizer, ids, messages, offered, template_kwargs),
              *_history_point(tokenizer, ids, history, offered, template_kwargs)}
    return ChatPrompt(ids, reply, tuple(sorted(points)), grammar, refused_call_tokens(tokenizer, tools, tool_choice))
