"""A tool call that max_tokens cut off, read as far as it got: the offered tool it calls and its
arguments so far, as a prefix of their JSON object. That is what the OpenAI API returns for a call cut
off (the call, with truncated arguments, and finish_reason "length"), and what agent frameworks handle
(a tool call whose arguments do not parse: an error, a retry), where the call's raw markup given back
as answer text was taken for the model's final answer.

Both syntaxes of engines.forced_call: JSON in <tool_call> (the arguments are already JSON text) and
Qwen's XML, whose complete parameters the template's own parser reads (typed by the tool's schema)
and whose last, unfinished value is written as the start of its JSON value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .forced_call import JSON, TEXT_TYPES, XML

JSON_CALL = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*(?:,\s*"arguments"\s*:\s*(.*))?\Z', re.DOTALL)
XML_FUNCTION = re.compile(r"\s*<function=([^\s<>]+)>\n?")
# cut inside the tool's name: what of it was written (the forced call's grammar keeps it an offered name's prefix)
_JSON_NAME_CUT = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)\Z')
_XML_NAME_CUT = re.compile(r"\s*<function=([^\s<>]*)\Z")
XML_PARAMETER = re.compile(r"<parameter=([^\s<>]+)>\n?")
_PARAMETER_END = "\n</parameter>"
FUNCTION_END = "\n</function>"


def json_text(value: Any) -> str:
    """JSON as OpenAI writes tool arguments: non-ASCII text as itself ("東京", not "\\u6771\\u4eac")."""
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class CutCall:
    name: str
    arguments: str   # the start of the arguments' JSON object ("" when cut before it)


def without_partial_marker(text: str, marker: str) -> str:
    """`text` less a trailing start of `marker` (the generation stopped inside it)."""
    for size in range(min(len(marker), len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return text[:-size]
    return text


def cut_call(text: str, style: str, tools: Sequence[dict], parse: Callable[[str], Any]) -> CutCall | None:
    """The call `text` (what followed the call's opening marker) had begun, if it names an offered
    tool, or was cut inside a name only one offered tool's begins with (then its arguments are "");
    None otherwise (then it is not known to be a call). `parse` is the template's tool parser."""
    if style == JSON:
        call = _json_call(text)
    elif style == XML:
        call = _xml_call(text, tools, parse)
    else:
        call = None
    offered = {(tool.get("function") or {}).get("name") for tool in tools}
    if call is None and style in (JSON, XML):   # cut inside the name: the one offered tool whose name it begins
        cut = (_JSON_NAME_CUT if style == JSON else _XML_NAME_CUT).match(text)
        begun = cut.group(1) if cut is not None else ""
        named = [name for name in offered if begun and str(name).startswith(begun)]
        call = CutCall(named[0], "") if len(named) == 1 else None
    return call if call is not None and call.name in offered else None


def _json_call(text: str) -> CutCall | None:
    match = JSON_CALL.match(text)
    if match is None:
        return None
    try:
        name = json.loads(match.group(1))
    except json.JSONDecodeError:
        return None
    return CutCall(str(name), match.group(2) or "")


def _xml_call(text: str, tools: Sequence[dict], parse: Callable[[str], Any]) -> CutCall | None:
    match = XML_FUNCTION.match(text)
    if match is None:
        return None
    name = match.group(1)
    closed = text.rfind("</parameter>") + len("</parameter>") if "</parameter>" in text else match.end()
    complete: dict[str, Any] = {}
    if closed > match.end():   # the parameters written in full, read (and typed) by the template's parser
        try:
            complete = dict(parse(text[:closed] + FUNCTION_END).get("arguments") or {})
        except Exception:  # noqa: BLE001 - not a readable call after all
            return None
    arguments = json_text(complete)[:-1]   # the object so far, left open
    opened = XML_PARAMETER.search(text, closed)
    if opened is not None:
        value = without_partial_marker(text[opened.end():], _PARAMETER_END)
        key = opened.group(1)
        as_text = _is_text(tool_properties(tools, name).get(key))
        arguments += (", " if complete else "") + json_text(key) + ": " + (json_text(value)[:-1] if as_text else value)
    return CutCall(name, arguments)


def tool_properties(tools: Sequence[dict], name: str) -> dict[str, Any]:
    for tool in tools:
        function = tool.get("function") or {}
        if function.get("name") == name:
            properties = (function.get("parameters") or {}).get("properties")
            return properties if isinstance(properties, dict) else {}
    return {}


def _is_text(schema: Any) -> bool:
    """A value the XML syntax writes as raw text (a string), not as JSON."""
    if not isinstance(schema, dict) or "type" not in schema:
        return True
    return str(schema["type"]).strip().lower() in TEXT_TYPES
