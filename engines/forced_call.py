"""A tool call forced by tool_choice ("required" or a named function): the reply's opening, which the
prompt already holds, and an llguidance grammar for everything the model writes after it, so the
reply is a call that mlx-lm's tool parser for the template reads back as a call of one of the
offered tools with arguments that satisfy its `parameters` schema. The engines apply the grammar
like a response_format's (engines.processing), under every engine and losslessly.

Two tool-call syntaxes (the tool parser mlx-lm picks from the chat template):

- JSON in <tool_call> (`json_tools`, the demo model):
  `<tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>`; ARGS is JSON matching the tool's
  `parameters`, written without free whitespace and with the separators the template's `tojson`
  writes (", " and ": "), as the model saw its earlier calls.
- Qwen3.5/3.6 XML (`qwen3_coder`): `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n
  ...</function>\n</tool_call>`. Parameters come in the schema's `properties` order (required ones
  always, optional ones may be left out; no others). A string-typed value (type "string", or an
  enum / const of strings) is the raw text the parser keeps: free text without `</parameter>` or
  `</tool_call>`, not "null" (which the parser reads as null), its minLength / maxLength kept, an enum
  or const as one of its values, a pattern kept, the common formats (FORMATS) kept. So is a value whose schema
  gives it no shape (a description only, or a required name missing from `properties`). Every other
  value is JSON matching the property's schema (numbers, booleans, null, objects, arrays, unions),
  which the parser converts by the property's type. A property typed through a local `$ref` or as
  one type or null (`["string", "null"]`, anyOf [X, null]: Pydantic's Optional) is written as that
  type's value or `null`, and the parser is given that type (parser_view) to read it back. Other
  untyped or union-typed properties are read back by mlx-lm's parser with its own rules (JSON
  containers, else text), which may not give the JSON value back exactly.

A forced reply is exactly one call, then the end of the reply (EOS): tool_choice "required" calls
one of the tools, a named function calls that one. Further calls are not offered even when
parallel_tool_calls allows them: a weak model under the grammar tends to repeat its call until
max_tokens (the demo model does), and an agent forcing a call wants that call; a model that should
choose several calls is asked with tool_choice "auto".

Arguments hold the declared properties only: an object schema that lists `properties` and says
nothing of `additionalProperties` gets no others (every such call still satisfies the schema, and a
model is not left adding invented keys until max_tokens); `parameters` that say nothing of keys at
all (`{}`, `{"type": "object"}`, missing) are a tool without arguments: the empty object.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from contracts.errors import InvalidRequestError

XML = "qwen3_coder"
JSON = "json_tools"
# the separators of the chat templates' `tojson` (Python's json.dumps defaults)
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# the parser's (mlx_lm.tool_parsers.qwen3_coder) reading of a parameter: types it keeps as text
TEXT_TYPES = {"string", "str", "text", "varchar", "char", "enum"}
_PARAMETER_NAME = re.compile(r"[^\s<>]+")   # what the parser reads as a parameter's name
# keywords that give a value a shape; a parameter schema with none of them (a description only) is text
_SHAPES = ("type", "enum", "const", "anyOf", "oneOf", "allOf", "not", "if", "$ref", "properties", "items",
           "prefixItems", "additionalProperties", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_ANY_TEXT = r"/(.|\n)*/"
_NO_MARKERS = r"~/(.|\n)*(<\/parameter>|<\/tool_call>)(.|\n)*/"


@dataclass(frozen=True)
class ForcedCall:
    prefix: str             # the reply's first text, appended to the prompt
    grammar: str | None     # llguidance grammar of the rest of the reply; None: the syntax is not known


def tool_call_style(tokenizer: Any) -> str:
    """The template's tool-call syntax, by the tool parser mlx-lm chose for it ("" when none)."""
    module = getattr(getattr(tokenizer, "tool_parser", None), "__module__", "") or ""
    return module.rpartition(".")[2]


def forced_call(tokenizer: Any, tools: list[dict], tool_choice: Any, thinking: bool = False) -> ForcedCall:
    """The opening and grammar of the call tool_choice forces. InvalidRequestError when the call
    cannot be forced in this template's syntax (a tool's schema the grammar cannot hold).
    `thinking`: the prompt ends in an open thinking block (thinking asked for): the reply thinks,
    closes the block as the template does, then opens the call; nothing is prefilled."""
    style = tool_call_style(tokenizer)
    start = tokenizer.tool_call_start
    named = None if tool_choice == "required" else tool_choice["function"]["name"]
    if named is None:
        prefix = start + "\n"
    elif style == XML:
        prefix = f"{start}\n<function={named}>\n"
    elif style == JSON:
        prefix = f'{start}\n{{"name": {json.dumps(named)}, "arguments": '
    else:
        raise InvalidRequestError(f"this model's tool-call format ({style or 'unknown'}) cannot force a named "
                                  "function; use tool_choice \"required\"", param="tool_choice")
    if style not in (XML, JSON):
        return ForcedCall(prefix, None)   # "required" is only prompted for: no grammar for this syntax
    functions = [tool["function"] for tool in tools]
    if named is not None:
        functions = [f for f in functions if f["name"] == named]
    if not functions:
        raise InvalidRequestError(f"tool_choice names {named!r}, which is not among the tools", param="tool_choice",
                                  code="unknown_tool")
    grammar = _Grammar(tokenizer, style).build(functions, named is not None)
    if thinking:
        opening = _literal(prefix.removeprefix(tokenizer.tool_call_start))
        grammar = _after_thinking(tokenizer, f"{_marker(tokenizer, tokenizer.tool_call_start)} {opening} call",
                                  _as_rule(grammar, "call"))
        prefix = ""
    return ForcedCall(prefix, _checked(grammar))


def answer_or_call(tokenizer: Any, tools: list[dict], answer_schema: dict[str, Any],
                   thinking: bool = False) -> str | None:
    """The grammar of a reply that is either the JSON answer `answer_schema` describes (a response_format
    beside tools) or one call of one of the tools, as tool_choice "required" writes it (then the reply ends).
    None when the template's call syntax has no grammar here (the answer's JSON grammar alone then holds).
    `thinking`: the prompt ends in an open thinking block, closed before either."""
    style = tool_call_style(tokenizer)
    if style not in (XML, JSON):
        return None
    call = _as_rule(_Grammar(tokenizer, style).build([tool["function"] for tool in tools], False), "call")
    opening = f"{_marker(tokenizer, tokenizer.tool_call_start)} {_literal(chr(10))} call"
    rules = f"answer: %json {json.dumps(answer_schema)}\n{call}"
    grammar = _after_thinking(tokenizer, f"(answer | {opening})", rules) if thinking \
        else f"start: answer | {opening}\n{rules}"
    return _checked(grammar)


def _as_rule(grammar: str, name: str) -> str:
    """A grammar's start rule renamed, to be one part of a larger grammar."""
    return grammar.replace("start: ", f"{name}: ", 1)


def _checked(grammar: str) -> str:
    return (validated if len(grammar) <= CACHED_GRAMMAR_CHARS else validated.__wrapped__)(grammar)


def _after_thinking(tokenizer: Any, reply: str, rules: str) -> str:
    """`reply` (a Lark sequence over `rules`) behind a thinking block to close: free reasoning (no markers
    in it), the end of thinking, the blank line the template writes after it, then the reply."""
    start, end = tokenizer.tool_call_start, tokenizer.think_end
    reasoning = _ANY_TEXT
    for marker in (end, start):   # an added token is never text; a marker written as text is kept out
        if not _marker(tokenizer, marker).startswith("<["):
            reasoning += " & ~/(.|\\n)*" + re.escape(marker).replace("/", "\\/") + "(.|\\n)*/"
    return (f"start: REASONING {_marker(tokenizer, end)} {_literal(chr(10) * 2)} {reply}\nREASONING: {reasoning}\n"
            + rules)


# Grammars up to this size are cached (an agent's tool list is tens of KiB): 32 entries then hold at
# most ~16 MiB, where tool lists of up to a request body's 4 MiB each could pin hundreds of MiB.
CACHED_GRAMMAR_CHARS = 256 * 1024


@functools.lru_cache(maxsize=32)
def validated(lark: str) -> str:
    """The Lark text as an llguidance grammar, compiled once here: a schema it cannot hold is the
    request's fault (a 400), never an error mid-generation. Cached: an agent sends the same tools
    every turn (twenty tools take ~30 ms to compile on a slow CPU)."""
    import llguidance

    try:
        grammar = llguidance.grammar_from("lark", lark)
        problem = llguidance.LLMatcher.validate_grammar(grammar)
    except (TypeError, ValueError) as exc:
        problem = str(exc)
    if problem:
        raise InvalidRequestError(f"tools: a constrained call's parameters are not a usable JSON schema: {problem}",
                                  param="tools", code="invalid_json_schema")
    return grammar


def _literal(text: str) -> str:
    return json.dumps(text)


def _marker(tokenizer: Any, text: str) -> str:
    """A tool-call marker in the grammar: an added token (<tool_call> in Qwen's vocabulary) is one
    special token to llguidance, which plain text never matches; otherwise the text itself."""
    added = getattr(tokenizer, "get_added_vocab", None)
    token = (added() if added is not None else {}).get(text)
    return f"<[{token}]>" if token is not None else _literal(text)


def _json_options(schema: dict[str, Any]) -> dict[str, Any]:
    guidance = schema.get("x-guidance")
    return {**schema, "x-guidance": {**JSON_OPTIONS, **(guidance if isinstance(guidance, dict) else {})}}


# keywords whose values are data, not subschemas
_DATA_KEYWORDS = ("enum", "const", "default", "examples")


def _declared_only(schema: Any) -> Any:
    """The schema with every object that lists `properties` closed to others where it does not say."""
    if isinstance(schema, list):
        return [_declared_only(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: value if key in _DATA_KEYWORDS else _declared_only(value) for key, value in schema.items()}
    if isinstance(schema.get("properties"), dict) and "additionalProperties" not in schema \
            and "patternProperties" not in schema and "unevaluatedProperties" not in schema:
        out["additionalProperties"] = False
    return out


# keywords that say nothing of an object's keys: `parameters` with these only take no arguments
_ANNOTATIONS = {"type", "title", "description", "$schema", "$id", "$comment", "default", "examples", "strict"}


def arguments_schema(function: dict[str, Any]) -> dict[str, Any]:
    """A function's arguments as the grammar writes them: a JSON schema of an object, declared
    properties only. No parameters, `{}` or `{"type": "object"}` (how agents and MCP servers declare
    a tool that takes nothing; nothing is said of any key): the empty object."""
    parameters = function.get("parameters") or {}
    if set(parameters) <= _ANNOTATIONS:
        parameters = {**parameters, "properties": {}}
    return _declared_only(parameters if "type" in parameters else {"type": "object", **parameters})


class _Grammar:
    """The Lark text of a forced call in one syntax."""

    def __init__(self, tokenizer: Any, style: str):
        self.style = style
        self.end = _marker(tokenizer, tokenizer.tool_call_end)
        self.rules: list[str] = []

    def build(self, functions: list[dict[str, Any]], named: bool) -> str:
        """Named: the prefix holds the call's opening up to its arguments. "required": the prefix
        holds the <tool_call> line; the name is one of the functions'. One call either way."""
        bodies = [self._function(index, function) for index, function in enumerate(functions)]
        if named:
            self.rules.insert(0, f"start: {bodies[0]}")
        else:
            head = _literal('{"name": ') if self.style == JSON else _literal("<function=")
            names = [_literal(f'{json.dumps(f["name"])}, "arguments": ' if self.style == JSON else f'{f["name"]}>\n')
                     for f in functions]
            self.rules.insert(0, f"start: {head} (" + " | ".join(f"{n} {b}" for n, b in zip(names, bodies)) + ")")
        return "\n".join(self.rules) + "\n"

    def _function(self, index: int, function: dict[str, Any]) -> str:
        """The rule of one function's call after its name: the arguments and the closing markers."""
        schema = arguments_schema(function)
        rule = f"fn{index}"
        if self.style == JSON:
            self.rules.append(f"{rule}: %json {json.dumps(_json_options(schema))} " + _literal("}\n") + f" {self.end}")
            return rule
        parameters = self._parameters(index, function["name"], schema)
        self.rules.append(f"{rule}: " + " ".join([*parameters, _literal("</function>\n"), self.end]))
        return rule

    def _parameters(self, index: int, name: str, schema: dict[str, Any]) -> list[str]:
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = [r for r in schema.get("required", []) if isinstance(r, str)]
        names = [*properties, *(r for r in required if r not in properties)]
        defs = {key: schema[key] for key in ("$defs", "definitions") if key in schema}
        out = []
        for number, parameter in enumerate(names):
            if not _PARAMETER_NAME.fullmatch(parameter):
                if parameter in required:
                    raise InvalidRequestError(
                        f"tool {name!r}: required parameter {parameter!r} cannot be written in this model's "
                        "tool-call format (a name without spaces or angle brackets)", param="tools",
                        code="invalid_json_schema")
                continue   # optional: never written
            rule = f"p{index}_{number}"
            value = self._value(rule, properties.get(parameter, {}), defs)
            self.rules.append(f"{rule}: " + _literal(f"<parameter={parameter}>\n") + f" {value}")
            out.append(rule if parameter in required else f"{rule}?")
        return out

    def _value(self, rule: str, schema: Any, defs: dict[str, Any]) -> str:
        """A parameter's value and the line closing it, as the parser reads it back by the type (the
        type parser_view gives it: through a $ref, or the one type of a union with null)."""
        close = _literal("\n</parameter>\n")
        schema = schema if isinstance(schema, dict) else {}
        shape, nullable = _typed(schema, defs)
        kind = shape.get("type")
        choices = shape["enum"] if "enum" in shape else [shape["const"]] if "const" in shape else None
        texts = choices is not None and all(isinstance(c, str) for c in choices)
        if (isinstance(kind, str) and kind.strip().lower() in TEXT_TYPES and (choices is None or texts)) \
                or (kind is None and texts) or not any(key in schema for key in _SHAPES):
            null = ' | "null"' if nullable else ""   # the parser reads "null" as null
            if choices is not None:
                return "(" + " | ".join(_literal(c) for c in choices) + f"{null}) {close}"
            terminal = rule.upper() + "_TEXT"   # one lexeme, its end included: text never swallows it
            self.rules.append(f"{terminal}: (({_text(shape)} & {_NO_MARKERS} & ~/(?i:null)/){null}) {close}")
            return terminal
        self.rules.append(f"{rule}v: %json {json.dumps(_json_options({**defs, **schema}))}")
        return f"{rule}v {close}"


def _resolve(schema: Any, defs: dict[str, Any]) -> Any:
    """A property's schema with a local $ref (#/$defs/NAME, #/definitions/NAME) followed: the target
    under the $ref's own siblings (default, description)."""
    for _ in range(8):
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        if not isinstance(ref, str):
            return schema
        key, _, name = ref.removeprefix("#/").partition("/")
        target = defs.get(key, {}).get(name) if isinstance(defs.get(key), dict) else None
        if not ref.startswith("#/") or not isinstance(target, dict):
            return schema
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _typed(schema: dict[str, Any], defs: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The shape the parser should convert a value by, and whether null is allowed too: a $ref
    followed; a union of one type with null (`["string", "null"]`, anyOf / oneOf with a null branch,
    Pydantic's Optional) as that one type."""
    schema = _resolve(schema, defs)
    kind = schema.get("type")
    if isinstance(kind, list):
        others = [k for k in kind if k != "null"]
        if len(others) == 1 and isinstance(others[0], str) and len(kind) > 1:
            return {**schema, "type": others[0]}, True
        return schema, False
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if kind is None and isinstance(branches, list) and all(isinstance(b, dict) for b in branches):
            resolved = [_resolve(b, defs) for b in branches]
            others = [b for b in resolved if b.get("type") != "null"]
            if len(others) == 1 and isinstance(others[0].get("type"), str):
                rest = {k: v for k, v in schema.items() if k != key}
                return {**others[0], **rest}, len(others) < len(resolved)
    return schema, False


def parser_view(tools: list[dict] | tuple[dict, ...]) -> list[dict]:
    """The tools as mlx-lm's qwen3_coder parser reads the values of a call: it converts a value by
    its property's own `type`, so a property typed through a $ref or a union with null gets that
    type (else a string came back with JSON quotes, a number as text)."""
    out = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        parameters = function.get("parameters") if isinstance(function, dict) else None
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        if not isinstance(properties, dict):
            out.append(tool)
            continue
        defs = {key: parameters[key] for key in ("$defs", "definitions") if key in parameters}
        typed = {}
        for name, schema in properties.items():
            kind = _typed(schema, defs)[0].get("type") if isinstance(schema, dict) else None
            typed[name] = {**schema, "type": kind} if isinstance(kind, str) else schema
        out.append({**tool, "function": {**function, "parameters": {**parameters, "properties": typed}}})
    return out


_DATE = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# The string formats a tool's arguments carry most (JSON Schema's `format`; RFC 3339 dates and times):
# what the JSON syntax gets from llguidance, written as text for the XML syntax's raw values. The URI
# and e-mail forms are the usual practical ones (a scheme then no whitespace; local@domain.tld).
FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}[Tt ]{_TIME}",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "email": r"[A-Za-z0-9._%+-]+@" + _LABEL + r"(\." + _LABEL + ")+",
    "uri": r"[A-Za-z][A-Za-z0-9+.-]*:[^\s]+",
    "ipv4": rf"{_OCTET}(\.{_OCTET}){{3}}",
    "hostname": _LABEL + r"(\." + _LABEL + ")*",
}
FORMATS["url"] = FORMATS["uri"]


def _text(schema: dict[str, Any]) -> str:
    """Any text, or as long as minLength / maxLength allow, matching the pattern and the format (one
    of FORMATS; others are not enforced) if given."""
    low, high = schema.get("minLength"), schema.get("maxLength")
    text = _ANY_TEXT
    if isinstance(low, int) or isinstance(high, int):
        low = low if isinstance(low, int) and low > 0 else 0
        text = f"/(.|\\n){{{low},{high if isinstance(high, int) else ''}}}/"
    pattern = schema.get("pattern")
    if isinstance(pattern, str):   # JSON Schema's pattern is a search: anchors say where it must match
        head = tail = "(.|\\n)*"
        head = "" if pattern.startswith("^") else head
        body = pattern.removeprefix("^")
        anchored = body.endswith("$") and not body.endswith("\\$")
        body = re.sub(r"(?<!\\)/", r"\\/", body.removesuffix("$") if anchored else body)
        text += f" & /{head}({body}){'' if anchored else tail}/"
    form = FORMATS.get(schema.get("format")) if isinstance(schema.get("format"), str) else None
    if form is not None:
        escaped = form.replace("/", "\\/")   # a Lark regex ends at an unescaped slash
        text += f" & /{escaped}/"
    return text
