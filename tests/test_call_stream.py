"""Tool-call arguments streamed as they are written (engines.call_stream, ReplySplitter's CallDelta): every
reading of a call cut anywhere is a start of the arguments the whole call is read as, readings only grow,
and joined deltas are the call a non-streamed reply returns, in both call syntaxes."""

from __future__ import annotations

import json
import random

import pytest
from mlx_lm.tool_parsers import json_tools, qwen3_coder

from contracts.chat import ReplyFormat
from engines.call_stream import CallReader, settled_object, streamed_call
from engines.cut_call import json_text
from engines.forced_call import JSON, XML
from engines.reply import ReplySplitter

PROPERTIES = {
    "path": {"type": "string"}, "content": {"type": "string"}, "line": {"type": "integer"},
    "ratio": {"type": "number"}, "force": {"type": "boolean"}, "options": {"type": "object"},
    "tags": {"type": "array"}, "mode": {"type": "string", "enum": ["a", "w"]}, "note": {"description": "any"},
}
TOOLS = [{"type": "function", "function": {"name": "edit_file", "parameters": {
    "type": "object", "properties": PROPERTIES}}}]
CONTENTS = [
    'def f(x):\n    return "x\\\\y" + x\n\n',   # quotes, a backslash, trailing blank lines
    "東京 😀 naïve\tcafé",
    "null", "nullable", "NUL", "", "\n", "a </para b", "ends with a newline\n",
    '<div class="a"><p>x &lt; y</p>\n</div>\n' * 3,   # markup-like text all along
    "docs: write <parameter=path>, then the file",     # a parameter's opening inside a value
]
ARGUMENTS = [
    {"path": "src/a.py", "content": content, "line": 12, "ratio": 1.5, "force": True,
     "options": {"indent": [2, 4], "name": "x"}, "tags": ["a", "b"], "mode": "w", "note": "free text"}
    for content in CONTENTS
] + [{"content": "only"}, {}, {"line": 3, "content": "after a number"}]


def _xml(arguments: dict) -> str:
    body = "".join(f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value)}\n</parameter>\n"
                   for key, value in arguments.items())
    return f"\n<function=edit_file>\n{body}</function>\n"


def _json(arguments: dict, style: dict) -> str:
    return "\n" + json.dumps({"name": "edit_file", "arguments": arguments}, **style) + "\n"


def _xml_parse(text: str) -> dict:
    return qwen3_coder.parse_tool_call(text.strip(), TOOLS)


def _readings(text: str, style: str) -> list[str]:
    """The readings of `text` cut after each character; a CallReader (which escapes a growing value a piece
    at a time) reads each alike."""
    parse = _xml_parse if style == XML else (lambda call: json_tools.parse_tool_call(call))
    reader, out = CallReader(style, TOOLS, parse), []
    for cut in range(len(text) + 1):
        reading = streamed_call(text[:cut], style, TOOLS, parse)
        assert reader.read(text[:cut]) == reading
        if reading is not None:
            assert reading.name == "edit_file"
            out.append(reading.arguments)
    return out


def _check(readings: list[str], final: str) -> None:
    assert readings, "the call never opened"
    for before, after in zip(readings, readings[1:]):
        assert after.startswith(before), (before, after)
    assert all(final.startswith(reading) for reading in readings)
    if len(final) > 2:   # it streamed, not only at the end
        assert len({r for r in readings if len(r) < len(final)}) > 2


@pytest.mark.parametrize("arguments", ARGUMENTS)
def test_xml_readings_are_starts_of_the_whole_calls_arguments(arguments):
    text = _xml(arguments)
    final = json_text(_xml_parse(text)["arguments"])
    _check(_readings(text, XML), final)


@pytest.mark.parametrize("arguments", ARGUMENTS)
@pytest.mark.parametrize("style", [{}, {"separators": (",", ":")}, {"indent": 2}, {"ensure_ascii": False}],
                         ids=["canonical", "compact", "indented", "unicode"])
def test_json_readings_are_starts_of_the_whole_calls_arguments(arguments, style):
    text = _json(arguments, style)
    final = json_text(json.loads(text)["arguments"])
    _check(_readings(text, JSON), final)


def test_a_text_value_streams_character_by_character_and_held_back_values_wait_for_their_end():
    text = _xml({"content": "hello world", "line": 1234})
    readings = _readings(text, XML)
    assert '{"content": "hello wo' in readings   # the text value, as it is written
    assert '{"content": "hello world", "line": ' in readings and '{"content": "hello world", "line": 12' not in readings
    assert settled_object('{"line": 12') == '{"line": '   # a number settles at its delimiter
    assert settled_object('{"line": 1.') == '{"line": '
    assert settled_object('{"line": 12, "x": [1, ') == '{"line": 12, "x": '
    assert settled_object('{"s": "a\\') == '{"s": "a'   # an escape cut in half
    assert settled_object('{"s": "\\ud83d') == '{"s": "'   # half a surrogate pair
    assert settled_object('"as a string"') == ""


def test_a_repeated_parameter_keeps_the_value_sent(qwen_chat_tokenizer):
    """The parser lets a parameter's second value replace its first, which a stream has sent: the call keeps
    the value sent (a stream cannot take text back), read alike whatever the chunks."""
    reply = ReplyFormat(tools=tuple(TOOLS), parse_tools=True)
    text = "<tool_call>\n<function=edit_file>\n<parameter=path>\na\n</parameter>\n<parameter=path>\nb\n" \
           "</parameter>\n</function>\n</tool_call>"
    for pieces in ([text[:45], text[45:]], list(text)):
        deltas, calls = _split(ReplySplitter(qwen_chat_tokenizer, reply), text, pieces)
        assert [c.arguments for c in calls] == ['{"path": "a"}'] == ["".join(d.arguments for d in deltas)]
    assert settled_object('{"path": "a", "path": "b"') == '{"path": "a"'


def test_no_reading_before_the_name_is_whole_or_of_a_tool_not_offered():
    assert streamed_call("\n<function=edit_fi", XML, TOOLS, _xml_parse) is None
    assert streamed_call("\n<function=delete_all>\n", XML, TOOLS, _xml_parse) is None
    assert streamed_call('\n{"name": "edit_f', JSON, TOOLS, json_tools.parse_tool_call) is None


def _split(splitter: ReplySplitter, text: str, pieces: list[str]):
    deltas, calls = [], []
    for piece in pieces:
        out = splitter.feed(piece)
        deltas += out.call_deltas
        calls += out.tool_calls
    out = splitter.finish()
    return deltas + out.call_deltas, calls + out.tool_calls


def _pieces(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, len(text) // 3)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


@pytest.mark.parametrize("seed", range(6))
def test_the_splitter_streams_each_call_and_its_deltas_join_to_the_call(qwen_chat_tokenizer, seed):
    rng = random.Random(seed)
    first, second = ARGUMENTS[seed], ARGUMENTS[-3]
    reply = ReplyFormat(tools=tuple(TOOLS), parse_tools=True)
    text = f"Let me edit.\n\n<tool_call>{_xml(first)}</tool_call>\n<tool_call>{_xml(second)}</tool_call>"
    deltas, calls = _split(ReplySplitter(qwen_chat_tokenizer, reply), text, _pieces(text, rng))
    whole_deltas, whole = _split(ReplySplitter(qwen_chat_tokenizer, reply), text, [text])
    assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in whole]
    assert [json.loads(c.arguments) for c in calls] == [json.loads(json_text(_xml_parse(_xml(a))["arguments"]))
                                                        for a in (first, second)]
    for index, call in enumerate(calls):
        mine = [d for d in deltas if d.index == index]
        assert mine[0].opens and mine[0].name == call.name and mine[0].id == call.id
        assert not any(d.opens for d in mine[1:]) and mine[-1].done == call
        assert "".join(d.arguments for d in mine) == call.arguments
        assert len(mine) > 2   # streamed in several deltas
    assert [d.index for d in whole_deltas] == [0, 1] and all(d.opens and d.done for d in whole_deltas)


def test_the_splitter_streams_json_calls(demo_tokenizer):
    reply = ReplyFormat(tools=tuple(TOOLS), parse_tools=True)
    arguments = {"path": "a.py", "content": "print('hi')\n" * 5}
    text = f"<tool_call>\n{json.dumps({'name': 'edit_file', 'arguments': arguments})}\n</tool_call>"
    deltas, calls = _split(ReplySplitter(demo_tokenizer, reply), text, [text[i:i + 3] for i in range(0, len(text), 3)])
    assert [json.loads(c.arguments) for c in calls] == [arguments]
    assert "".join(d.arguments for d in deltas) == calls[0].arguments and len(deltas) > 10


def test_a_call_that_opened_and_then_fails_to_parse_is_still_a_call(qwen_chat_tokenizer):
    """Once a call's name went out it stays a call, with its arguments as far as they read (closed where that
    makes an object), as a call max_tokens cut off: read the same way however its text came in chunks."""
    reply = ReplyFormat(tools=tuple(TOOLS), parse_tools=True)
    text = "<tool_call>\n<function=edit_file>\n<parameter=path>\na.py\n</parameter>\n<parameter=line>\nmany\n" \
           "</parameter>\n</function>\n</tool_call>"   # "many" is no integer: the parser raises
    for pieces in ([text], [text[:60], text[60:]], list(text)):   # however it is chunked
        deltas, calls = _split(ReplySplitter(qwen_chat_tokenizer, reply), text, pieces)
        assert [(c.name, c.arguments) for c in calls] == [("edit_file", '{"path": "a.py", "line": ')]
        assert "".join(d.arguments for d in deltas) == calls[0].arguments
    # a markup that does not parse, naming no offered tool: not known to be a call, it stays text
    markup = text.replace("edit_file", "delete_all").replace("</function>", "")
    piece = ReplySplitter(qwen_chat_tokenizer, reply).feed(markup)
    assert piece.tool_calls == [] and "delete_all" in piece.text


def test_tool_choice_none_streams_no_call(qwen_chat_tokenizer):
    reply = ReplyFormat(tools=tuple(TOOLS), parse_tools=True, refuse_calls=True)
    text = f"<tool_call>{_xml(ARGUMENTS[0])}</tool_call>"
    deltas, calls = _split(ReplySplitter(qwen_chat_tokenizer, reply), text, list(text))
    assert deltas == [] and calls == []


@pytest.mark.parametrize("seed", range(4))
def test_a_reader_reads_growing_text_in_pieces_as_the_whole_is_read(seed):
    """CallReader reads only what grew while a text value grows: in pieces of any size (markup, quotes and
    escapes in them) its readings are the ones of the text read whole."""
    rng = random.Random(seed)
    for arguments in ARGUMENTS:
        texts = ((XML, _xml(arguments)), (JSON, _json(arguments, {})), (JSON, _json(arguments, {"indent": 1})))
        for style, text in texts:
            parse = _xml_parse if style == XML else json_tools.parse_tool_call
            reader, cut = CallReader(style, TOOLS, parse), 0
            while cut < len(text):
                cut = min(len(text), cut + rng.choice([1, 2, 3, 7, 20]))
                assert reader.read(text[:cut]) == streamed_call(text[:cut], style, TOOLS, parse), (text, cut)
            assert reader.read("\n<function=edit_file>\n") == streamed_call("\n<function=edit_file>\n", style, TOOLS,
                                                                             parse)   # the next call
