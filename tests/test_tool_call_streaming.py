"""A tool call's arguments stream as the model writes them, through each API's own client: a coding agent
writing a file shows it growing (the openai SDK's `tool_calls.function.arguments.delta` events, the
anthropic SDK's `input_json` events, the Responses API's `function_call_arguments.delta`), and the joined
stream is the very call a non-streamed reply returns. On the demo model, every engine streams its calls
the same way."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server, served_demo

CONTENT = 'import sys\n\n\ndef main() -> None:\n    print("hello, world", file=sys.stderr)  # "quoted" \\ back\n'
PARAMETERS = {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"},
                                               "mode": {"type": "integer"}}, "required": ["path", "content"]}
FUNCTION = {"name": "write_file", "description": "Write a file", "parameters": PARAMETERS}
CALL = (f"Writing it.\n</think>\n\nI will write the file.\n\n<tool_call>\n<function=write_file>\n"
        f"<parameter=path>\nsrc/main.py\n</parameter>\n<parameter=content>\n{CONTENT * 3}\n</parameter>\n"
        "<parameter=mode>\n420\n</parameter>\n</function>\n</tool_call>")
WRITTEN = {"path": "src/main.py", "content": CONTENT * 3, "mode": 420}
ASK = [{"role": "user", "content": "Write the script."}]


@pytest.fixture(scope="module")
def server(request):
    tokenizer = request.getfixturevalue("qwen_chat_tokenizer")
    with live_server(create_app(FakeBackend(tokenizer=tokenizer, reply=CALL))) as srv:
        yield srv


def test_openai_sdk_sees_the_arguments_grow(server):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    tools = [{"type": "function", "function": FUNCTION}]
    with client.chat.completions.stream(model="default", messages=ASK, tools=tools, max_tokens=400) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    deltas = [e for e in events if e.type == "tool_calls.function.arguments.delta"]
    done = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    assert len(deltas) > 20 and [(d.name, d.index) for d in done] == [("write_file", 0)]
    assert "".join(d.arguments_delta for d in deltas) == done[0].arguments
    assert json.loads(done[0].arguments) == WRITTEN
    # the file's text shows as it is written: snapshots that hold part of it
    partial = [d.arguments for d in deltas if '"content": "import sys' in d.arguments]
    assert len({len(p) for p in partial}) > 10
    whole = client.chat.completions.create(model="default", messages=ASK, tools=tools, max_tokens=400)
    message, streamed = whole.choices[0].message, final.choices[0].message
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls] == \
        [(c.function.name, c.function.arguments) for c in streamed.tool_calls]
    assert message.content == streamed.content == "I will write the file."
    assert whole.choices[0].finish_reason == final.choices[0].finish_reason == "tool_calls"


def test_the_first_call_chunk_opens_it_as_openai_does(server):
    """The call's first chunk carries index, id, type and name; the ones after only index and arguments."""
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", timeout=30, json={
            "model": "default", "stream": True, "messages": ASK, "max_tokens": 400,
            "tools": [{"type": "function", "function": FUNCTION}]}) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    calls = [call for c in chunks for call in c["choices"][0]["delta"].get("tool_calls", [])]
    assert set(calls[0]) == {"index", "id", "type", "function"} and calls[0]["function"]["name"] == "write_file"
    assert all(set(c) == {"index", "function"} and set(c["function"]) == {"arguments"} for c in calls[1:])
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls" and not chunks[-1]["choices"][0]["delta"]


def test_anthropic_sdk_sees_input_json_grow(server):
    client = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)
    tool = {"name": FUNCTION["name"], "description": FUNCTION["description"], "input_schema": PARAMETERS}
    with client.messages.stream(model="default", max_tokens=400, messages=ASK, tools=[tool]) as stream:
        events = list(stream)
        message = stream.get_final_message()
    inputs = [e for e in events if e.type == "input_json"]
    assert len(inputs) > 20 and inputs[-1].snapshot == WRITTEN
    assert json.loads("".join(e.partial_json for e in inputs)) == WRITTEN
    # the file's text arrives as it is written (the SDK's snapshot shows a string once whole; its JSON grows)
    sent = [""]
    for e in inputs:
        sent.append(sent[-1] + e.partial_json)
    writing = [text for text in sent if '"content": "import sys' in text and '"mode"' not in text]
    assert len(writing) > 10
    assert [(b.type, getattr(b, "input", None)) for b in message.content] == \
        [("thinking", None), ("text", None), ("tool_use", WRITTEN)]
    whole = client.messages.create(model="default", max_tokens=400, messages=ASK, tools=[tool])
    assert [(b.name, b.input) for b in whole.content if b.type == "tool_use"] == [("write_file", WRITTEN)]
    assert message.stop_reason == whole.stop_reason == "tool_use"


def test_responses_sdk_sees_function_call_arguments_grow(server):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    tools = [{"type": "function", **FUNCTION}]
    with client.responses.stream(model="default", input="Write the script.", tools=tools,
                                 max_output_tokens=400) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(deltas) > 20 and len(done) == 1
    assert "".join(d.delta for d in deltas) == done[0].arguments and json.loads(done[0].arguments) == WRITTEN
    added = [e.item for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    assert [(a.name, a.arguments) for a in added] == [("write_file", "")]
    calls = [item for item in final.output if item.type == "function_call"]
    whole = client.responses.create(model="default", input="Write the script.", tools=tools, max_output_tokens=400)
    assert [(c.name, c.arguments, c.call_id) for c in calls] == [("write_file", done[0].arguments, added[0].call_id)]
    assert [(c.name, c.arguments) for c in whole.output if c.type == "function_call"] == \
        [(c.name, c.arguments) for c in calls]


def test_every_engine_streams_the_demo_models_forced_call_as_it_returns_it():
    """The demo model's JSON tool calls (forced, greedy): the joined stream is the non-streamed call, under
    every engine, and the engines write the same call."""
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"]}}}
    ask = dict(model="default", messages=[{"role": "user", "content": "Weather in Paris for three days?"}],
               tools=[weather], tool_choice="required", temperature=0, max_tokens=40)
    with served_demo() as (srv, runtime):
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        written = {}
        for engine in runtime.engine_names:
            whole = client.chat.completions.create(**ask, extra_body={"engine": engine}).choices[0]
            calls: dict[int, list[str]] = {}
            for chunk in client.chat.completions.create(**ask, stream=True, extra_body={"engine": engine}):
                for call in chunk.choices[0].delta.tool_calls or []:
                    calls.setdefault(call.index, [call.function.name]).append(call.function.arguments or "")
            streamed = [(parts[0], "".join(parts[1:])) for _, parts in sorted(calls.items())]
            assert streamed == [(c.function.name, c.function.arguments) for c in whole.message.tool_calls], engine
            written[engine] = streamed
    assert len({json.dumps(w) for w in written.values()}) == 1, written


def test_responses_sdk_sees_a_custom_tools_input_grow(qwen_chat_tokenizer):
    """Codex's apply_patch, a custom (freeform) tool: its input streams as text in
    `response.custom_tool_call_input.delta`s that join to the input the call is returned with."""
    patch = "*** Begin Patch\n*** Update File: src/main.py\n@@\n-print('hi')\n+print(\"hello, world\")\n*** End Patch"
    reply = (f"Patching.\n</think>\n\n<tool_call>\n<function=apply_patch>\n<parameter=input>\n{patch * 3}\n"
             "</parameter>\n</function>\n</tool_call>")
    tool = {"type": "custom", "name": "apply_patch", "description": "Edit files.", "format": {"type": "text"}}
    with live_server(create_app(FakeBackend(tokenizer=qwen_chat_tokenizer, reply=reply))) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        events = list(client.responses.create(model="default", input="Fix it.", tools=[tool], stream=True))
        whole = client.responses.create(model="default", input="Fix it.", tools=[tool])
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    done = [e.input for e in events if e.type == "response.custom_tool_call_input.done"]
    assert len(deltas) > 10 and done == ["".join(deltas)] == [patch * 3]
    assert [(o.type, o.input) for o in whole.output if o.type == "custom_tool_call"] == \
        [("custom_tool_call", patch * 3)] == [(o.type, o.input) for o in events[-1].response.output
                                               if o.type == "custom_tool_call"]


def test_parallel_tool_calls_false_streams_the_first_call_only(qwen_chat_tokenizer):
    """Two calls written, parallel_tool_calls false: the stream opens and fills the first call only, as the
    non-streamed reply returns it."""
    second = CALL.split("</think>\n\n", 1)[1].replace("src/main.py", "src/other.py")
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply=f"{CALL}\n{second}")
    ask = dict(model="default", messages=ASK, tools=[{"type": "function", "function": FUNCTION}], max_tokens=600,
               parallel_tool_calls=False)
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        whole = client.chat.completions.create(**ask).choices[0]
        chunks = list(client.chat.completions.create(**ask, stream=True))
    calls = [call for chunk in chunks for call in chunk.choices[0].delta.tool_calls or []]
    assert {call.index for call in calls} == {0} and len(calls) > 20
    assert "".join(call.function.arguments for call in calls) == whole.message.tool_calls[0].function.arguments
    assert [c.function.name for c in whole.message.tool_calls] == ["write_file"]
    assert json.loads(whole.message.tool_calls[0].function.arguments) == WRITTEN
    assert chunks[-1].choices[0].finish_reason == whole.finish_reason == "tool_calls"


def test_a_forced_qwen_xml_call_streams_as_it_returns_on_a_real_runtime(tiny_qwen_chat_target):
    """A generated checkpoint with Qwen3.6's template (XML calls), its forced call written by the grammar
    token by token (a random model: a long string value, cut by max_tokens): under every engine the joined
    stream is the call the non-streamed reply returns."""
    from engines.runtime import load_runtime

    tool = {"type": "function", "function": {"name": "write_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "size": {"type": "integer"}},
        "required": ["path", "size"]}}}
    runtime = load_runtime(str(tiny_qwen_chat_target))
    ask = dict(model="default", messages=ASK, tools=[tool], tool_choice="required", temperature=0, max_tokens=48,
               reasoning_effort="none")
    with live_server(create_app(runtime)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        for engine in runtime.engine_names:
            whole = client.chat.completions.create(**ask, extra_body={"engine": engine}).choices[0]
            chunks = list(client.chat.completions.create(**ask, stream=True, extra_body={"engine": engine}))
            calls = [c for chunk in chunks for c in chunk.choices[0].delta.tool_calls or []]
            assert [c.function.name for c in calls if c.id] == [c.function.name for c in whole.message.tool_calls]
            assert "".join(c.function.arguments for c in calls) == whole.message.tool_calls[0].function.arguments
            assert whole.message.tool_calls[0].function.name == "write_file", engine
