"""The text of a request as routing and classification read it, built once at the edge.

The label is about the reply the request asks for, which the system prompt and the last user
message decide; earlier turns only give context, so they are kept apart (the classifier weights
them lower). The gateway builds one RequestText per request and carries it through routing into
the classifier; the classifier CLI builds the same object from JSONL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .errors import InvalidRequestError
from .names import forces_tool_call


@dataclass(frozen=True)
class RequestText:
    system: str = ""                   # system / developer prompt(s)
    user: str = ""                     # the last user message, or a completion prompt
    history: str = ""                  # every other turn, in order
    response_format: str | None = None  # OpenAI response_format.type, if any
    tools: str = ""                    # functions the request's body offers the model (tools_text); "" if none
    last_reply: str = ""               # the assistant message just before the last user message ("" if none)


def content_text(content: Any) -> str:
    """Text of an OpenAI message `content`: a string, or a list of parts of which text parts count."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
        return "\n".join(texts)
    raise InvalidRequestError("message content must be a string or a list of content parts", param="messages")


def response_format_type(response_format: Any) -> str | None:
    """`{"type": "json_object"}` -> "json_object"; a bare string is taken as the type; None stays None."""
    if response_format is None:
        return None
    if isinstance(response_format, str):
        return response_format
    if isinstance(response_format, Mapping):
        kind = response_format.get("type")
        if kind is None or isinstance(kind, str):
            return kind
    raise InvalidRequestError("response_format must be an object with a string `type`", param="response_format")


def reply_format(response_format: Any, tool_choice: Any = None) -> str | None:
    """The response_format type the classifier reads: the request's own, else "json_object" where
    `tool_choice` (OpenAI's, as sent) forces a call, whose reply is the call's JSON arguments; the
    gateway routes such a request the same way."""
    kind = response_format_type(response_format)
    if isinstance(tool_choice, Mapping) and tool_choice.get("type") == "allowed_tools":
        allowed = tool_choice.get("allowed_tools")
        tool_choice = allowed.get("mode") if isinstance(allowed, Mapping) else None
    return "json_object" if kind is None and forces_tool_call(tool_choice) else kind


def tools_text(tools: Any, tool_choice: Any = None) -> str:
    """The functions a request's body offers the model, as one line each ("name: description (params)"),
    or "" where none are offered or `tool_choice` is "none". Reads every shape a client sends: OpenAI
    chat ({"type": "function", "function": {...}}), the Responses API's flat one, Anthropic's
    ({"name", "description", "input_schema"}) and custom tools ({"type": "custom", "custom": {...}})."""
    if not tools or not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)) or tool_choice == "none":
        return ""
    lines = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        body = tool.get("function") or tool.get("custom") or tool
        if not isinstance(body, Mapping) or not isinstance(body.get("name"), str):
            continue
        schema = body.get("parameters") or body.get("input_schema") or {}
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        params = ", ".join(properties) if isinstance(properties, Mapping) else ""
        description = body.get("description") if isinstance(body.get("description"), str) else ""
        lines.append(f"{body['name']}: {description} ({params})")
    return "\n".join(lines)


def from_record(record: Mapping[str, Any]) -> RequestText:
    """A classifier JSONL line ({"text"} or {"messages"}, optional "response_format", "tools" and
    "tool_choice", as in a chat request) as the request the gateway would classify; its types are the
    caller's to check."""
    kind = reply_format(record.get("response_format"), record.get("tool_choice"))
    tools = tools_text(record.get("tools"), record.get("tool_choice"))
    if "messages" in record:
        return from_messages(record["messages"], kind, tools)
    return RequestText(user=record["text"], response_format=kind, tools=tools)


def from_messages(messages: Sequence[Mapping[str, Any]], response_format: Any = None, tools: str = "") -> RequestText:
    """Split an OpenAI chat into system text, the last user message and the turns around it."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise InvalidRequestError("messages must be a list of message objects", param="messages")
    system_parts: list[str] = []
    turns: list[tuple[str, str]] = []
    for message in messages:
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise InvalidRequestError("each message must be an object with a string `role`", param="messages")
        role = message["role"]
        text = content_text(message.get("content"))
        if role in ("system", "developer"):
            system_parts.append(text)
        else:
            turns.append((role, text))
    last_user = max((i for i, (role, _) in enumerate(turns) if role == "user"), default=None)
    if last_user is None:
        user, earlier, last_reply = "", turns, ""
    else:
        user, earlier = turns[last_user][1], turns[:last_user] + turns[last_user + 1 :]
        before = turns[last_user - 1] if last_user > 0 else ("", "")
        last_reply = before[1] if before[0] == "assistant" else ""
    return RequestText(
        system="\n".join(system_parts),
        user=user,
        history="\n".join(text for _, text in earlier),
        response_format=response_format_type(response_format),
        tools=tools,
        last_reply=last_reply,
    )


def from_prompt(prompt: str) -> RequestText:
    """A text completion: the prompt is all there is."""
    return RequestText(user=prompt)
