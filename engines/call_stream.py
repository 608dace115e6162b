"""A tool call read while it is being written, for streams that send its arguments as they come
(OpenAI's `tool_calls[].function.arguments` deltas, Anthropic's `input_json_delta`, the Responses
API's `function_call_arguments.delta`): a coding agent writing a file shows it growing instead of
waiting, silent, for the whole call.

What is read is a *settled prefix* of the arguments' JSON text: the text that the call's final
arguments (the template's parser reading the whole call, written by engines.cut_call.json_text)
are sure to begin with, whatever the rest of the call turns out to be. So a client that joins the
deltas gets the very arguments a non-streamed reply returns. Settled are the values written in full,
and a text value's characters so far (JSON escapes each character on its own, so a string's start
escapes to the start of its escape); held back are a number, boolean or container until it ends, the
end of a text value that may still be the start of its closing markup, and a value that may still be
`null` (Qwen's parser reads the text "null" as JSON null).

Both syntaxes of engines.forced_call: JSON in <tool_call>, and Qwen's XML.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .cut_call import (
    FUNCTION_END,
    JSON_CALL,
    XML_FUNCTION,
    XML_PARAMETER,
    CutCall,
    json_text,
    tool_properties,
    without_partial_marker,
)
from .forced_call import JSON, TEXT_TYPES, XML

_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"
_PARAMETER_CLOSE = "</parameter>"
_XML_TAIL = len(_PARAMETER_CLOSE) - 1   # how far back a closing marker the new text completes may begin


Escape = Callable[[str], str]   # a string's JSON text less its closing quote


def _escape(value: str) -> str:
    return json_text(value)[:-1]


@dataclass(frozen=True)
class _OpenText:
    """A text value a reading ended inside: the reading is `head` and the value's start as JSON text."""

    start: int          # where the value's text begins in the call's text
    head: str           # the reading before the value
    value: str = ""     # JSON: the string's characters so far (its text up to the end, decoded whole)
    whole: bool = True  # JSON: all of its text so far decoded (no escape cut in half held back)


class CallReader:
    """streamed_call for one call read again and again as its text grows. While a text value (a file being
    written) is all that grows, only its new text is read and escaped, so each reading costs little more
    than copying the text; text that may change more than the value (in Qwen's XML a closing marker; in
    JSON a quote, or an escape cut in half) is read in full."""

    def __init__(self, style: str, tools: Sequence[dict], parse: Callable[[str], Any]):
        self.style, self.tools, self.parse = style, tools, parse
        self._raw: str | None = None   # the last text value escaped, and its escape
        self._escaped = ""
        self._open: _OpenText | None = None   # the last reading's open text value
        self._name, self._text = "", ""       # the last reading's call name, and the text it read

    def read(self, text: str) -> CutCall | None:
        opened, reading = self._open, None
        if opened is not None and text.startswith(self._text):   # the same call, grown
            grown = len(self._text)
            if self.style == XML and _PARAMETER_CLOSE not in text[max(opened.start, grown - _XML_TAIL):]:
                reading = CutCall(self._name, opened.head + _xml_text(text[opened.start:], self._escape))
            elif self.style == JSON and opened.whole and (more := _string_part(text[grown:])) is not None:
                opened = replace(opened, value=opened.value + more)
                reading = CutCall(self._name, opened.head + self._escape(opened.value))
        if reading is None:
            reading, opened = _reading(text, self.style, self.tools, self.parse, self._escape)
            self._name = reading.name if reading is not None else ""
        self._open, self._text = opened, text
        return reading

    def _escape(self, value: str) -> str:
        # JSON escapes each character on its own: a value that continues the last one escapes its new part
        if self._raw is None or not value.startswith(self._raw):
            self._raw, self._escaped = value, _escape(value)
        elif len(value) > len(self._raw):
            self._escaped += json_text(value[len(self._raw):])[1:-1]
            self._raw = value
        return self._escaped


def streamed_call(text: str, style: str, tools: Sequence[dict], parse: Callable[[str], Any],
                  escape: Escape = _escape) -> CutCall | None:
    """The call `text` (what followed the call's opening marker) is writing, once its name is written in
    full and names an offered tool: the name and the settled prefix of its arguments' JSON ("" before
    any). None while the name is not known, or when the text is no call this reader follows (it is then
    read whole when it closes)."""
    return _reading(text, style, tools, parse, escape)[0]


def _reading(text: str, style: str, tools: Sequence[dict], parse: Callable[[str], Any],
             escape: Escape) -> tuple[CutCall | None, _OpenText | None]:
    # a call of a tool not offered is not read as it grows (it is read whole when it closes)
    offered = {(tool.get("function") or {}).get("name") for tool in tools}
    if style == JSON:
        return _json_call(text, offered, escape)
    if style == XML:
        return _xml_call(text, offered, tools, parse, escape)
    return None, None


# ---- JSON: {"name": NAME, "arguments": {...}} ----

def _json_call(text: str, offered: set, escape: Escape) -> tuple[CutCall | None, _OpenText | None]:
    match = JSON_CALL.match(text)
    if match is None:
        return None, None
    try:
        name = json.loads(match.group(1))
    except json.JSONDecodeError:
        return None, None
    if name not in offered:
        return None, None
    if match.group(2) is None:
        return CutCall(str(name), ""), None
    arguments, opened = _settled_object(match.group(2), escape)
    if opened is not None:   # its place in the call's text
        opened = replace(opened, start=match.start(2) + opened.start)
    return CutCall(str(name), arguments), opened


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def settled_object(text: str, escape: Escape = _escape) -> str:
    """The settled prefix of the JSON object `text` begins (as json_text writes its parse): its members
    written in full, and the start of a string value being written. "" unless `text` begins an object."""
    return _settled_object(text, escape)[0]


def _settled_object(text: str, escape: Escape) -> tuple[str, _OpenText | None]:
    at = _skip(text, 0)
    if at == len(text) or text[at] != "{":
        return "", None   # not begun, or not an object (arguments as a string): read whole at the end
    out, seen = "{", set()
    at += 1
    while True:
        at = _skip(text, at)
        if at == len(text) or text[at] == "}":
            return out, None
        if seen:
            if text[at] != ",":
                return out, None
            at = _skip(text, at + 1)
        if at == len(text) or text[at] != '"':
            return out, None
        try:
            key, at = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError:
            return out, None   # the key is still being written
        at = _skip(text, at)
        if key in seen or at == len(text) or text[at] != ":":
            return out, None   # a repeated key changes a value already sent: nothing more settles
        at = _skip(text, at + 1)
        head = out + (", " if seen else "") + json_text(key) + ": "
        if at == len(text):
            return head, None
        try:
            value, end = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError:
            if text[at] != '"':
                return head, None
            # a string being written: its characters so far
            characters, whole = _string_start(text[at + 1:])
            return head + escape(characters), _OpenText(at + 1, head, characters, whole)
        if not isinstance(value, (str, dict, list)):
            after = _skip(text, end)   # "1" may go on as "12" or "1.5": a number settles at its delimiter
            if after == len(text) or text[after] not in ",}":
                return head, None
        out = head + json_text(value)
        seen.add(key)
        at = end


def _string_part(text: str) -> str | None:
    """The characters of `text` as more of a JSON string being written; None unless it is that whole (no
    closing quote, no escape cut in half, nor a surrogate pair's first half at its end)."""
    try:
        value = json.loads('"' + text + '"')
    except json.JSONDecodeError:
        return None
    return None if value and "\ud800" <= value[-1] <= "\udbff" else value


def _string_start(body: str) -> tuple[str, bool]:
    """The characters of a JSON string whose text so far (after its opening quote) is `body`, less an
    escape cut in the middle and a surrogate pair's first half; and whether none was left out."""
    for cut in range(len(body), max(len(body) - 12, -1), -1):
        try:
            value = json.loads('"' + body[:cut] + '"')
        except json.JSONDecodeError:
            continue
        if value and "\ud800" <= value[-1] <= "\udbff":
            return value[:-1], False
        return value, cut == len(body)
    return "", False


# ---- Qwen XML: <function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function> ----

def _xml_call(text: str, offered: set, tools: Sequence[dict], parse: Callable[[str], Any],
              escape: Escape) -> tuple[CutCall | None, _OpenText | None]:
    match = XML_FUNCTION.match(text)
    if match is None or match.group(1) not in offered:
        return None, None
    name = match.group(1)
    parameters = _parameters(text, match.end())
    # a parameter written again would replace a value sent (the parser keeps the last): the first stands,
    # and nothing from the repeat on settles
    keys = [key for key, _, _ in parameters]
    repeat = next((i for i, key in enumerate(keys) if key in keys[:i]), None)
    parameters = parameters[:repeat]
    # where each parameter written in full ends; the longest run of them the template's parser reads (and
    # types by the schema): a value it cannot read (an integer written "many") settles nothing after its key
    ends = [match.end(), *(end for _, _, end in parameters if end is not None)]
    last = len(ends) - 1
    complete: dict[str, Any] | None = {}
    while last > 0 and (complete := _read(text[:ends[last]], parse)) is None:
        last -= 1
    complete = complete or {}
    arguments = json_text(complete)[:-1]
    if last == len(parameters) or (repeat is not None and last == len(ends) - 1):
        return CutCall(name, arguments), None   # no parameter being written (none after a repeat settles)
    key, start, end = parameters[last]
    arguments += (", " if complete else "") + json_text(key) + ": "
    if end is not None or repeat is not None or not _read_as_text(tool_properties(tools, name).get(key)):
        return CutCall(name, arguments), None   # its value did not read, or is not text: it settles once whole
    reading = CutCall(name, arguments + _xml_text(text[start:], escape))
    # read again from the grown text alone once where the value begins is settled: a character follows its
    # opening (the newline the parser drops)
    settled = start < len(text) or text.endswith(">\n")
    return reading, _OpenText(start, arguments) if settled else None


def _parameters(text: str, start: int) -> list[tuple[str, int, int | None]]:
    """The call's parameters in order, as the parser reads them (a parameter runs to the first closing marker
    after it, whatever its value holds): each one's name, where its value begins, and where it ends (past its
    closing marker; None while it is being written)."""
    out: list[tuple[str, int, int | None]] = []
    while (opened := XML_PARAMETER.search(text, start)) is not None:
        close = text.find(_PARAMETER_CLOSE, opened.end())
        if close < 0:
            out.append((opened.group(1), opened.end(), None))
            break
        start = close + len(_PARAMETER_CLOSE)
        out.append((opened.group(1), opened.end(), start))
    return out


def _xml_text(value: str, escape: Escape) -> str:
    """A text value being written, as the start of its JSON string: less the start of its closing markup and
    the one newline before it (the parser drops it), and nothing while it may still be "null"."""
    value = without_partial_marker(value, _PARAMETER_CLOSE)
    value = value[:-1] if value.endswith("\n") else value
    return escape(value) if len(value) > 4 or not "null".startswith(value.lower()) else ""


def _read(parameters: str, parse: Callable[[str], Any]) -> dict[str, Any] | None:
    """The arguments of a call's opening and parameters written in full; None where they do not read."""
    try:
        return dict(parse(parameters + FUNCTION_END).get("arguments") or {})
    except Exception:  # noqa: BLE001 - the parser's own errors (a value its type does not read)
        return None


def _read_as_text(schema: Any) -> bool:
    """A value mlx-lm's qwen3_coder parser returns as the text written: an undeclared parameter, or one
    declared a string type (a declared one without a type it reads as JSON when it can)."""
    if not schema:
        return True
    return isinstance(schema, dict) and "type" in schema and str(schema["type"]).strip().lower() in TEXT_TYPES
