"""The grammar of a forced tool call (engines.forced_call), without a model: what it accepts after the
prefilled opening is a call that mlx-lm's tool parser for the template reads back as a valid call,
in both syntaxes; what breaks the schema, the syntax or the parser's reading is refused; the reply
ends after the call; tool_choice auto / none impose nothing."""

from __future__ import annotations

import json

import llguidance
import llguidance.hf
import pytest

from contracts.errors import InvalidRequestError
from engines.chat import chat_prompt
from engines.forced_call import forced_call

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                     "days": {"type": "integer", "minimum": 1},
                                     "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"]}}}
EDIT = {"type": "function", "function": {"name": "edit", "parameters": {
    "type": "object", "$defs": {"change": {"type": "object", "properties": {"old": {"type": "string"},
                                                                          "new": {"type": "string"}},
                                           "required": ["old", "new"]}},
    "properties": {"path": {"type": "string"}, "changes": {"type": "array", "items": {"$ref": "#/$defs/change"}},
                   "dry": {"type": "boolean"}, "note": {"type": ["string", "null"]}},
    "required": ["path", "changes"]}}}
NOW = {"type": "function", "function": {"name": "now"}}     # no parameters: no arguments
TOOLS = [WEATHER, EDIT, NOW]
ASK = [{"role": "user", "content": "hi"}]
_LLG: dict[int, object] = {}



def _matcher(tokenizer, grammar: str) -> llguidance.LLMatcher:
    if id(tokenizer) not in _LLG:
        _LLG[id(tokenizer)] = llguidance.hf.from_tokenizer(tokenizer._tokenizer)
    return llguidance.LLMatcher(_LLG[id(tokenizer)], grammar)


def _read(tokenizer, choice, text: str):
    """The call the parser reads from prefix + text when the grammar takes all of `text` as a whole
    reply; None when the grammar refuses it."""
    call = forced_call(tokenizer, TOOLS, choice)
    matcher = _matcher(tokenizer, call.grammar)
    ids = tokenizer.encode(text, add_special_tokens=False)
    if matcher.try_consume_tokens(ids) != len(ids) or not matcher.is_accepting():
        return None
    body = (call.prefix + text).removeprefix(tokenizer.tool_call_start).removesuffix(tokenizer.tool_call_end)
    return tokenizer.tool_parser(body.strip(), TOOLS)


def _xml(name: str, **parameters: str) -> str:
    inner = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in parameters.items())
    return f"<function={name}>\n{inner}</function>\n</tool_call>"


NAMED_WEATHER = {"type": "function", "function": {"name": "get_weather"}}


def test_xml_calls_read_back_as_valid_calls(qwen_chat_tokenizer):
    tok = qwen_chat_tokenizer
    assert _read(tok, "required", _xml("get_weather", city="Paris", days="3", unit="f")) == {
        "name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "f"}}
    assert _read(tok, "required", _xml("get_weather", city="Two\nway")) == {
        "name": "get_weather", "arguments": {"city": "Two\nway"}}      # optional parameters may be left out
    changes = '[{"old": "a", "new": "b"}]'
    assert _read(tok, "required", _xml("edit", path="x.py", changes=changes, dry="true", note="null")) == {
        "name": "edit", "arguments": {"path": "x.py", "changes": [{"old": "a", "new": "b"}], "dry": True, "note": None}}
    assert _read(tok, "required", _xml("now")) == {"name": "now", "arguments": {}}
    # named: the prompt already holds "<tool_call>\n<function=get_weather>\n"
    call = _xml("get_weather", city="Oslo").removeprefix("<function=get_weather>\n")
    assert _read(tok, NAMED_WEATHER, call) == {"name": "get_weather", "arguments": {"city": "Oslo"}}


@pytest.mark.parametrize("text", [
    _xml("nope"),                                                   # not a tool
    _xml("get_weather", days="3"),                                  # required parameter missing
    _xml("get_weather", unit="c", city="Paris"),                    # out of the schema's order
    _xml("get_weather", city="Paris", days="0"),                    # below the minimum
    _xml("get_weather", city="Paris", days="two"),                  # not an integer (the parser would raise)
    _xml("get_weather", city="Paris", unit="kelvin"),               # not in the enum
    _xml("get_weather", city="Amsterdam!"),                         # over maxLength
    _xml("get_weather", city="null"),                               # the parser reads "null" as null
    _xml("get_weather", city="Pa</parameter>ris"),                  # would end the value early
    _xml("get_weather", city="Paris", country="FR"),                # not a declared parameter
    _xml("edit", path="x.py", changes='[{"old": "a"}]'),            # a $ref'd object missing a required key
    _xml("edit", path="x.py", changes="[]", dry="yes"),            # not a boolean
    _xml("get_weather", city="Paris") + "\nThat is all.",           # text after the call
    _xml("get_weather", city="Paris") + "\n<tool_call>\n" + _xml("now"),   # one call per forced reply
])
def test_xml_grammar_refuses(qwen_chat_tokenizer, text):
    assert _read(qwen_chat_tokenizer, "required", text) is None


def test_json_calls_read_back_as_valid_calls(demo_tokenizer):
    tok = demo_tokenizer
    call = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
    assert _read(tok, "required", call) == {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}
    edit = ('{"name": "edit", "arguments": {"path": "a", "changes": [{"old": "x", "new": "y"}], "note": null}}'
            "\n</tool_call>")
    assert _read(tok, "required", edit)["arguments"]["changes"] == [{"old": "x", "new": "y"}]
    assert _read(tok, "required", '{"name": "now", "arguments": {}}\n</tool_call>') == {"name": "now", "arguments": {}}
    # named: the prompt already holds '<tool_call>\n{"name": "get_weather", "arguments": '
    assert _read(tok, NAMED_WEATHER, '{"city": "Rome", "days": 2}}\n</tool_call>') == {
        "name": "get_weather", "arguments": {"city": "Rome", "days": 2}}


@pytest.mark.parametrize("text", [
    '{"name": "nope", "arguments": {}}\n</tool_call>',
    '{"name": "get_weather", "arguments": {"days": 2}}\n</tool_call>',              # required key missing
    '{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>',          # the template's separators
    '{"name": "get_weather", "arguments": {"city": "Paris", "extra": 1}}\n</tool_call>',  # declared keys only
    '{"name": "now", "arguments": {"a": 1}}\n</tool_call>',                         # no parameters: {}
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call> ok',      # text after the call
])
def test_json_grammar_refuses(demo_tokenizer, text):
    assert _read(demo_tokenizer, "required", text) is None


def test_the_markers_are_the_tokens_the_model_writes(qwen_chat_tokenizer, demo_tokenizer):
    """Qwen's <tool_call> / </tool_call> are added tokens (one special token to llguidance, which text
    never matches); the demo model writes them as text."""
    end = qwen_chat_tokenizer.get_added_vocab()["</tool_call>"]
    assert f"<[{end}]>" in forced_call(qwen_chat_tokenizer, TOOLS, "required").grammar
    assert '"</tool_call>"' in forced_call(demo_tokenizer, TOOLS, "required").grammar


def test_parameters_the_xml_syntax_cannot_name(qwen_chat_tokenizer):
    spaced = {"type": "object", "properties": {"a b": {"type": "string"}, "ok": {"type": "string"}}, "required": ["ok"]}
    tool = {"type": "function", "function": {"name": "t", "parameters": spaced}}
    assert "a b" not in forced_call(qwen_chat_tokenizer, [tool], "required").grammar   # optional: never written
    required = {"type": "function", "function": {"name": "t", "parameters": {**spaced, "required": ["a b"]}}}
    with pytest.raises(InvalidRequestError) as error:
        forced_call(qwen_chat_tokenizer, [required], "required")
    assert error.value.code == "invalid_json_schema" and "'a b'" in str(error.value)


def test_only_forced_choices_constrain_the_reply(qwen_chat_tokenizer):
    tok = qwen_chat_tokenizer
    for choice in (None, "auto", "none"):
        assert chat_prompt(tok, ASK, TOOLS, choice).grammar is None
    forced = chat_prompt(tok, ASK, TOOLS, "required")
    assert forced.grammar is not None
    # thinking is off and the grammar starts after the prefilled opening, which the prompt holds
    assert tok.decode(forced.ids).endswith("</think>\n\n<tool_call>\n") and forced.reply.prefix == "<tool_call>\n"


def test_a_value_without_a_shape_is_text(qwen_chat_tokenizer):
    """A parameter described but not typed (or required yet undeclared) is written as text, which the
    parser keeps as text."""
    loose = {"type": "function", "function": {"name": "note", "parameters": {
        "type": "object", "properties": {"text": {"description": "anything"}}, "required": ["text", "tag"]}}}
    call = forced_call(qwen_chat_tokenizer, [loose], "required")
    matcher = _matcher(qwen_chat_tokenizer, call.grammar)
    text = _xml("note", text="a b", tag="x")
    ids = qwen_chat_tokenizer.encode(text, add_special_tokens=False)
    assert matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()
    with pytest.raises(InvalidRequestError):
        forced_call(qwen_chat_tokenizer, [loose], {"type": "function", "function": {"name": "missing"}})


@pytest.mark.parametrize("parameters", [{}, {"type": "object"}, {"type": "object", "properties": {}}, None],
                         ids=["empty", "bare-object", "no-properties", "missing"])
def test_a_tool_without_declared_parameters_is_called_with_no_arguments(demo_tokenizer, qwen_chat_tokenizer,
                                                                          parameters):
    """`parameters: {}` and `{"type": "object"}` are how agents (and MCP servers) declare a tool that
    takes nothing, like a missing `parameters`: its forced call has the empty object as arguments. Left
    open, a weak model invents keys until max_tokens (the demo model did, greedy, for `{}`)."""
    function = {"name": "ping"} if parameters is None else {"name": "ping", "parameters": parameters}
    tools = [{"type": "function", "function": function}]
    for tok, empty, extra in (
            (demo_tokenizer, '{"name": "ping", "arguments": {}}\n</tool_call>',
             '{"name": "ping", "arguments": {"a": 1}}\n</tool_call>'),
            (qwen_chat_tokenizer, _xml("ping"), _xml("ping", a="1"))):
        matcher = _matcher(tok, forced_call(tok, tools, "required").grammar)
        ids = tok.encode(empty, add_special_tokens=False)
        assert matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()
        matcher = _matcher(tok, forced_call(tok, tools, "required").grammar)
        ids = tok.encode(extra, add_special_tokens=False)
        assert matcher.try_consume_tokens(ids) < len(ids) or not matcher.is_accepting()
    # an explicitly open object stays open
    open_ = [{"type": "function", "function": {"name": "ping", "parameters": {
        "type": "object", "additionalProperties": True}}}]
    matcher = _matcher(demo_tokenizer, forced_call(demo_tokenizer, open_, "required").grammar)
    ids = demo_tokenizer.encode('{"name": "ping", "arguments": {"a": 1}}\n</tool_call>', add_special_tokens=False)
    assert matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()


@pytest.mark.parametrize("choice", ["required", NAMED_WEATHER], ids=["required", "named"])
def test_thinking_asked_for_is_a_closed_block_before_the_forced_call(qwen_chat_tokenizer, choice):
    """enable_thinking asked for together with a forced call (Qwen3.6 with thinking on): the reply
    thinks first, closes the thinking block, then makes the call, the way the template writes such a
    turn; the call is not written inside a thinking block left open (the prompt ended
    "<think>\\n<tool_call>\\n"). The reasoning comes back as reasoning, the call as the call."""
    from engines.reply import ReplySplitter

    tok = qwen_chat_tokenizer
    forced = chat_prompt(tok, ASK, TOOLS, choice, {"enable_thinking": True})
    assert tok.decode(forced.ids).endswith("<|im_start|>assistant\n<think>\n")
    assert forced.reply.opens_in_reasoning and forced.reply.prefix == ""
    call = _xml("get_weather", city="Paris", unit="c")
    reply = "Paris, so get_weather.\n</think>\n\n<tool_call>\n" + call
    matcher = _matcher(tok, forced.grammar)
    ids = tok.encode(reply, add_special_tokens=False)
    assert matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()
    splitter = ReplySplitter(tok, forced.reply)
    pieces = [splitter.feed(reply), splitter.finish()]
    assert "".join(p.reasoning for p in pieces).strip() == "Paris, so get_weather."
    assert not "".join(p.text for p in pieces).strip()
    (parsed,) = [c for p in pieces for c in p.tool_calls]
    assert parsed.name == "get_weather" and json.loads(parsed.arguments) == {"city": "Paris", "unit": "c"}
    for refused in ("<tool_call>\n" + call,                        # the call inside the thinking block
                    "Hmm.\n</think>\n\nThe weather.",               # no call after it
                    "Hmm.\n</think>\n\n<tool_call>\n" + _xml("nope")):
        matcher = _matcher(tok, forced.grammar)
        ids = tok.encode(refused, add_special_tokens=False)
        assert matcher.try_consume_tokens(ids) < len(ids) or not matcher.is_accepting(), refused
    # thinking off (the default under a forced call) is unchanged: the call opens the reply
    plain = chat_prompt(tok, ASK, TOOLS, choice, {"enable_thinking": False})
    assert tok.decode(plain.ids).endswith("</think>\n\n<tool_call>\n" if choice == "required"
                                          else "</think>\n\n<tool_call>\n<function=get_weather>\n")


PYDANTIC = {"type": "function", "function": {"name": "order", "parameters": {
    "$defs": {"Mode": {"enum": ["fast", "slow"], "title": "Mode", "type": "string"},
              "Owner": {"type": "string", "pattern": "^[a-z]+$"},
              "Item": {"properties": {"sku": {"type": "string"}}, "required": ["sku"], "type": "object"}},
    "properties": {"mode": {"$ref": "#/$defs/Mode", "default": "fast"},
                   "owner": {"$ref": "#/$defs/Owner"},
                   "item": {"$ref": "#/$defs/Item"},
                   "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
                   "count": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
                   "ratio": {"type": ["number", "null"]}},
    "required": ["mode", "owner"], "title": "orderArguments", "type": "object"}}}


def _forced_reply(tok, tools, text: str):
    """The grammar's verdict on `text` as the whole forced reply, and the calls the reply gives back."""
    from engines.reply import ReplySplitter

    forced = chat_prompt(tok, ASK, tools, "required")
    matcher = _matcher(tok, forced.grammar)
    ids = tok.encode(text, add_special_tokens=False)
    accepted = matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()
    splitter = ReplySplitter(tok, forced.reply)
    calls = [c for piece in (splitter.feed(text), splitter.finish()) for c in piece.tool_calls]
    return accepted, [(c.name, _arguments(c.arguments)) for c in calls]


def _arguments(text: str):
    """A call's arguments read; as written where they do not read (a value its type refused)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def test_xml_values_typed_through_ref_or_a_union_with_null_read_back_as_their_type(qwen_chat_tokenizer):
    """Pydantic (FastMCP, LangChain) writes enums and nested models as `$ref`, Optional[X] as anyOf
    [X, null]: mlx-lm's parser converts a value by the property's own `type`, which these lack, so a
    string came back with the JSON quotes the grammar wrote around it ('"slow"', not in the enum) and
    an integer as text ("3"). The grammar writes such a value as its type's value and the parser
    reads it back as that type: every forced call validates against the original schema."""
    import jsonschema_rs

    tok, tools = qwen_chat_tokenizer, [PYDANTIC]
    schema = PYDANTIC["function"]["parameters"]
    call = _xml("order", mode="slow", owner="abc", item='{"sku": "x"}', note="hi there", count="3", ratio="0.5")
    accepted, calls = _forced_reply(tok, tools, call)
    assert accepted and calls == [("order", {"mode": "slow", "owner": "abc", "item": {"sku": "x"},
                                             "note": "hi there", "count": 3, "ratio": 0.5})]
    jsonschema_rs.validate(schema, calls[0][1])
    accepted, calls = _forced_reply(tok, tools, _xml("order", mode="fast", owner="q", note="null", count="null"))
    assert accepted and calls == [("order", {"mode": "fast", "owner": "q", "note": None, "count": None})]
    for refused in (_xml("order", mode='"slow"', owner="abc"),     # JSON quotes: the parser keeps them
                    _xml("order", mode="slow", owner="ABC"),       # the $ref'd pattern
                    _xml("order", mode="slow", owner="abc", count="many")):
        assert not _forced_reply(tok, tools, refused)[0], refused


FORMATTED = {"type": "function", "function": {"name": "visit", "parameters": {
    "type": "object", "properties": {name: {"type": "string", "format": name} for name in (
        "uri", "date", "date-time", "time", "uuid", "email", "ipv4", "hostname")},
    "required": ["uri"]}}}
FORMAT_EXAMPLES = {   # format: (a value of it, a value that is not)
    "uri": ("https://example.org/a?b=1", "example dot org"),
    "date": ("2026-11-26", "26/11/2026"),
    "date-time": ("2026-11-26T18:05:00Z", "2026-11-26 at six"),
    "time": ("18:05:00+01:00", "6pm"),
    "uuid": ("123e4567-e89b-12d3-a456-426614174000", "123e4567"),
    "email": ("ada@example.org", "ada at example"),
    "ipv4": ("192.168.0.10", "192.168.0.300"),
    "hostname": ("api.example.org", "api example"),
}


def test_xml_string_formats_are_kept(qwen_chat_tokenizer):
    """A raw-text value with a `format` (an agent's url, a date) matches it: the JSON syntax has
    llguidance's formats, the XML syntax writes strings as text, so the grammar carries the common
    formats as text patterns; a call that does not match is refused, one that does validates."""
    import jsonschema_rs

    tok, tools = qwen_chat_tokenizer, [FORMATTED]
    validator = jsonschema_rs.validator_for(FORMATTED["function"]["parameters"], validate_formats=True)
    for name, (good, bad) in FORMAT_EXAMPLES.items():
        values = {"uri": FORMAT_EXAMPLES["uri"][0], name: good}
        accepted, calls = _forced_reply(tok, tools, _xml("visit", **values))
        assert accepted and calls == [("visit", values)], name
        validator.validate(calls[0][1])
        refused = {"uri": FORMAT_EXAMPLES["uri"][0], name: bad}
        assert not _forced_reply(tok, tools, _xml("visit", **refused))[0], (name, bad)
        assert not validator.is_valid(refused), (name, bad)   # the examples are wrong by the schema too
