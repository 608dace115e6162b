"""tool_choice "required" / a named function is enforced by constrained decoding (engines.forced_call):
the reply is one call of an offered tool whose arguments satisfy its `parameters` schema, with
finish_reason "tool_calls", under every engine, greedy and sampled, streamed and not, through the
official SDKs against real runtimes: the embedded demo model (JSON calls in <tool_call>) and a
generated checkpoint with Qwen3.6's published template (XML calls). A random model almost never
writes a valid call by itself: without the grammar these fail. Greedy engines agree token for token
under the grammar (losslessness). Also: the grammar itself (what it accepts, what mlx-lm's parsers
read back), Anthropic tool_choice any / tool and the Responses API, schemas that cannot be forced
(400 at the door), and tool_choice auto / none (no grammar)."""

from __future__ import annotations

import json

import anthropic
import jsonschema_rs
import openai
import pytest

from gateway.http.app import create_app
from tests.fakes import live_server
from tests.ops_helpers import REPO

DEMO = REPO / "models" / "switchyard-demo"
ENGINES = ("raw", "mtp", "ddtree")
# bounded values: a random model given free text rarely ends it (a real one does), so every value here
# has an end the grammar reaches
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "minLength": 1, "maxLength": 16},
               "days": {"type": "integer", "minimum": 1, "maximum": 14},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "description": "Search the web",
          "parameters": {"type": "object", "properties": {
              "query": {"type": "string", "maxLength": 24},
              "exact": {"type": "boolean"},
              "sites": {"type": "array", "items": {"type": "string", "enum": ["docs", "blog", "forum"]},
                        "maxItems": 2}},
              "required": ["query", "exact"], "additionalProperties": False}}}
TOOLS = [WEATHER, SEARCH]
ASK = [{"role": "user", "content": "What is the weather in Paris this week?"}]
NAMED = {"type": "function", "function": {"name": "search"}}


def _tool(name: str) -> dict:
    return next(t["function"] for t in TOOLS if t["function"]["name"] == name)


def valid_call(name: str, arguments: str | dict) -> dict:
    """The call names an offered tool and its arguments validate against that tool's schema."""
    assert name in {t["function"]["name"] for t in TOOLS}, name
    value = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema_rs.validate(_tool(name)["parameters"], value)
    return value


@pytest.fixture(scope="module")
def json_server():
    """The demo model: its template writes calls as JSON in <tool_call>."""
    from engines.runtime import load_runtime

    runtime = load_runtime(str(DEMO / "target"), draft_dir=str(DEMO / "drafter"))
    assert runtime.engine_names == ENGINES
    runtime.set_prefix_cache(256 * 2**20)   # as `serve` does: every request here shares its prompt
    with live_server(create_app(runtime)) as srv:
        yield srv


@pytest.fixture(scope="module")
def xml_server(tmp_path_factory):
    """A tiny checkpoint with Qwen3.6's published template (XML calls), its MTP head and a drafter
    that often agree with it (so greedy agreement is a real test of the verified positions)."""
    from engines.runtime import load_runtime
    from engines.testing import write_drafter_checkpoint, write_target_checkpoint

    root = tmp_path_factory.mktemp("qwen_agree")
    target = write_target_checkpoint(root / "target", seed=0, variant="agree", chat="qwen3.6")
    drafter = write_drafter_checkpoint(root / "drafter", target, seed=0, variant="agree")
    runtime = load_runtime(str(target), draft_dir=str(drafter))
    assert runtime.engine_names == ENGINES
    runtime.set_prefix_cache(256 * 2**20)
    with live_server(create_app(runtime)) as srv:
        yield srv


def _openai(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)


def _forced(client: openai.OpenAI, choice, engine: str, temperature: float, stream: bool) -> tuple[str, str, str]:
    """(name, arguments, finish_reason) of the one call the reply holds."""
    kwargs = dict(model="default", messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=160,
                  temperature=temperature, seed=7, extra_body={"engine": engine})
    if not stream:
        choice_ = client.chat.completions.create(**kwargs).choices[0]
        calls = choice_.message.tool_calls
        assert calls is not None and len(calls) == 1, (choice_.finish_reason, choice_.message.content)
        assert not choice_.message.content
        return calls[0].function.name, calls[0].function.arguments, choice_.finish_reason
    calls: dict[int, dict] = {}
    content, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            slot = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            slot["name"] += tc.function.name or ""
            slot["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert len(calls) == 1 and not content, (finish, content, calls)
    return calls[0]["name"], calls[0]["arguments"], finish


@pytest.mark.parametrize("choice", ["required", NAMED], ids=["required", "named"])
@pytest.mark.parametrize("template", ["json", "xml"])
def test_forced_calls_are_valid_calls_under_every_engine(template, choice, request):
    client = _openai(request.getfixturevalue(f"{template}_server"))
    greedy = {}
    for engine in ENGINES:
        for temperature, stream in ((0.0, False), (0.8, True)):
            name, arguments, finish = _forced(client, choice, engine, temperature, stream)
            assert finish == "tool_calls", (engine, temperature, stream)
            valid_call(name, arguments)
            if choice is NAMED:
                assert name == "search"
            if temperature == 0:
                greedy[engine] = (name, arguments)
    # lossless under the grammar: speculation verifies every position against the masked target
    assert len(set(greedy.values())) == 1, greedy
    # the same greedy call streamed, and sampled without streaming
    assert _forced(client, choice, "ddtree", 0.0, True)[:2] == greedy["raw"]
    name, arguments, finish = _forced(client, choice, "mtp", 0.8, False)
    assert finish == "tool_calls"
    valid_call(name, arguments)


def test_anthropic_tool_choice_any_and_tool_give_a_tool_use_block(xml_server):
    client = anthropic.Anthropic(base_url=xml_server.base_url, api_key="unused", max_retries=0)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    message = client.messages.create(model="default", max_tokens=160, tools=tools, tool_choice={"type": "any"},
                                     messages=ASK)
    assert message.stop_reason == "tool_use"
    (block,) = [b for b in message.content if b.type == "tool_use"]
    valid_call(block.name, block.input)
    with client.messages.stream(model="default", max_tokens=160, tools=tools, messages=ASK,
                                tool_choice={"type": "tool", "name": "get_weather"}) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    (block,) = [b for b in final.content if b.type == "tool_use"]
    assert block.name == "get_weather"
    valid_call(block.name, block.input)


def test_responses_api_required_gives_a_function_call(xml_server):
    response = _openai(xml_server).responses.create(
        model="default", input="What is the weather in Paris?", max_output_tokens=160, tool_choice="required",
        tools=[{"type": "function", **t["function"]} for t in TOOLS])
    (call,) = [item for item in response.output if item.type == "function_call"]
    valid_call(call.name, call.arguments)


def test_a_schema_that_cannot_be_forced_is_a_400(xml_server):
    client = _openai(xml_server)
    bad = {"type": "function", "function": {"name": "broken", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}}}}}
    for choice in ("required", {"type": "function", "function": {"name": "broken"}}):
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER, bad], tool_choice=choice)
        body = error.value.body
        assert body["code"] == "invalid_json_schema" and body["param"] == "tools[1].function.parameters"
        assert "tool 'broken': parameters: not a usable JSON schema" in body["message"]
    # not forced: the model only reads the schema, nothing is compiled
    fine = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER, bad], max_tokens=2)
    assert fine.choices[0].finish_reason in ("length", "stop")
    # forcing another tool: the broken one is not decoded against
    named = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER, bad], max_tokens=2,
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert named.choices[0].finish_reason == "length"
    # a required parameter the XML syntax cannot name (the engine's check, still a 400 before any output)
    spaced = {"type": "function", "function": {"name": "spaced", "parameters": {
        "type": "object", "properties": {"a b": {"type": "string"}}, "required": ["a b"]}}}
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model="default", messages=ASK, tools=[spaced], tool_choice="required",
                                       stream=True)
    assert error.value.body["code"] == "invalid_json_schema" and "'a b'" in error.value.body["message"]


def test_a_tool_declared_without_parameters_is_called_with_none(json_server):
    """`parameters: {}` / `{"type": "object"}` (a tool that takes nothing, as agents and MCP servers
    declare it) gives `{}` as arguments, not an open object the demo model fills with invented keys
    until max_tokens."""
    client = _openai(json_server)
    tools = [{"type": "function", "function": {"name": "ping", "description": "ping", "parameters": {}}},
             {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}}]
    for choice in ("required", {"type": "function", "function": {"name": "ping"}},
                   {"type": "function", "function": {"name": "noop"}}):
        for engine in ENGINES:
            reply = client.chat.completions.create(model="default", messages=ASK, tools=tools, tool_choice=choice,
                                                   max_tokens=160, temperature=0, extra_body={"engine": engine})
            assert reply.choices[0].finish_reason == "tool_calls", (choice, engine)
            (call,) = reply.choices[0].message.tool_calls
            assert call.function.arguments == "{}"
