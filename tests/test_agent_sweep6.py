"""A sixth agent sweep: what coding agents and chat UIs hit (streams queued under load, custom tools on chat
completions, ...), reproduced with the openai / anthropic SDKs against a served gateway. Each test is a gap
the sweep found."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from gateway.config import GatewayConfig
from gateway.http.app import create_app
from tests.agent_sweeps import WEATHER, srv  # noqa: F401 - srv is the shared fixture
from tests.agent_sweeps import openai_client as _openai
from tests.agent_sweeps import post as _post
from tests.test_agent_sweep3 import _script, _xml_call, scripted_server  # noqa: F401 - a real Runtime over scripted engines
from tests.fakes import FakeBackend, live_server

HI = [{"role": "user", "content": "hi"}]


def _wait_until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def test_a_stream_waiting_in_a_full_queue_is_kept_alive(qwen_chat_tokenizer):
    """A stream queued behind other clients (every running slot taken) sent nothing, not even its headers,
    until the worker routed it: clients and proxies with an idle timeout dropped it and retried, adding load.
    Past stream_keepalive_seconds it starts without the route's headers (not chosen yet), SSE comments keep
    it alive, and the route comes in the stream as a comment; a queued prompt that cannot fit is still a
    plain 400, not an error inside a 200 stream."""
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply="Fine.\n</think>\n\nIt is sunny.",
                          gate=threading.Event())
    config = GatewayConfig(stream_keepalive_seconds=0.2, max_running=1, max_queue=1)
    with live_server(create_app(backend, config=config)) as server:
        scheduler = server.app.state.gateway.scheduler
        busy = threading.Thread(target=_post, args=(server, "/v1/chat/completions", {"messages": HI}))
        busy.start()
        _wait_until(backend.started.is_set)        # the worker's one slot is taken, and held by the gate

        impatient = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=0.8)
        stream = impatient.chat.completions.create(model="default", messages=HI, stream=True)
        assert scheduler.waiting == 1
        # the queue is full: one more is a 429, so the stream above really waits in it
        assert _post(server, "/v1/chat/completions", {"messages": HI}).status_code == 429
        time.sleep(1.2)   # longer than the client's read timeout: only the keep-alive comments hold it
        backend.gate.set()
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "It is sunny."
        busy.join()

        backend.gate.clear()
        backend.started.clear()
        busy = threading.Thread(target=_post, args=(server, "/v1/chat/completions", {"messages": HI}))
        busy.start()
        _wait_until(backend.started.is_set)
        with httpx.stream("POST", server.base_url + "/v1/chat/completions", json={
                "model": "default", "stream": True, "messages": HI}) as response:
            lines = response.iter_lines()
            first = next(lines)
            backend.gate.set()
            lines = [first, *(line for line in lines if line)]
        busy.join()
        assert response.status_code == 200 and "x-switchyard-engine" not in response.headers
        assert response.headers["x-request-id"].startswith("chatcmpl-")
        assert lines[0] == ": keep-alive", lines[:4]
        route = dict(line[2:].split(": ", 1) for line in lines if line.startswith(": X-Switchyard-"))
        assert route["X-Switchyard-Engine"] in backend.engine_names and set(route) == {
            "X-Switchyard-Engine", "X-Switchyard-Class", "X-Switchyard-Route-Reason"}
        first_data = next(i for i, line in enumerate(lines) if line.startswith("data:"))
        assert all(line.startswith(":") for line in lines[:first_data]) and lines[-1] == "data: [DONE]"

        backend.gate.clear()
        backend.started.clear()
        busy = threading.Thread(target=_post, args=(server, "/v1/chat/completions", {"messages": HI}))
        busy.start()
        _wait_until(backend.started.is_set)
        with pytest.raises(openai.BadRequestError) as overflow:   # 200 + an in-stream error would be APIError
            list(_openai(server).chat.completions.create(model="default", messages=HI, stream=True,
                                                         max_tokens=backend.context_length))
        assert overflow.value.code == "context_length_exceeded" and scheduler.waiting == 0
        backend.gate.set()
        busy.join()


PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+Hello, world!\n*** End Patch"
APPLY_PATCH = {"type": "custom", "custom": {"name": "apply_patch", "description": "Edit files with a patch.",
                                            "format": {"type": "text"}}}
PATCH_CALL = (f"Editing.\n</think>\n\n<tool_call>\n<function=apply_patch>\n<parameter=input>\n{PATCH}\n</parameter>\n"
              "</function>\n</tool_call>")
CHAT_WEATHER = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}
ADD = [{"role": "user", "content": "Add hello.txt"}]


def test_chat_completions_take_custom_tools(srv):
    """OpenAI's chat `custom` tools ({"type": "custom", "custom": {name, description, format}}), which
    /v1/responses takes, were a 400 on /v1/chat/completions. A text-format custom tool is offered to the model
    as a tool taking one string, its calls come back as {"type": "custom", "custom": {name, input}} (whole and
    streamed), a custom tool_choice forces it, and custom calls sent back in the history render as calls."""
    srv.backend.reply = PATCH_CALL
    client = _openai(srv)
    reply = client.chat.completions.create(model="default", messages=ADD, tools=[APPLY_PATCH, CHAT_WEATHER])
    offered = srv.backend.chats[-1]["tools"][0]["function"]
    assert offered["name"] == "apply_patch" and offered["parameters"]["properties"] == {"input": {"type": "string"}}
    call = reply.choices[0].message.tool_calls[0]
    assert (call.type, call.custom.name, call.custom.input) == ("custom", "apply_patch", PATCH)
    assert reply.choices[0].finish_reason == "tool_calls"

    chunks = list(client.chat.completions.create(model="default", messages=ADD, tools=[APPLY_PATCH], stream=True))
    streamed = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or ()]
    assert len(streamed) == 1 and streamed[0].type == "custom" and streamed[0].id
    assert streamed[0].model_extra["custom"] == {"name": "apply_patch", "input": PATCH}

    client.chat.completions.create(model="default", messages=ADD, tools=[APPLY_PATCH, CHAT_WEATHER],
                                   tool_choice={"type": "custom", "custom": {"name": "apply_patch"}})
    assert srv.backend.chats[-1]["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}
    client.chat.completions.create(model="default", messages=ADD, tools=[APPLY_PATCH, CHAT_WEATHER], tool_choice={
        "type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
            {"type": "custom", "custom": {"name": "apply_patch"}}]}})
    assert [t["function"]["name"] for t in srv.backend.chats[-1]["tools"]] == ["apply_patch"]

    srv.backend.reply = "Done.\n</think>\n\nAdded hello.txt."
    follow = client.chat.completions.create(model="default", tools=[APPLY_PATCH], messages=[
        *ADD, reply.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Success. Updated: A hello.txt"}])
    assert follow.choices[0].message.content == "Added hello.txt."
    prompt = srv.backend.encoded[-1]
    assert f"<function=apply_patch>\n<parameter=input>\n{PATCH}\n</parameter>" in prompt


def test_chat_custom_tools_that_cannot_be_served_say_why(srv):
    """A grammar-format custom tool is refused with the reason (as on /v1/responses), so is a custom
    tool_choice naming no custom tool, a name that two tools share, and a hosted tool (as before)."""
    grammar = {"type": "custom", "custom": {**APPLY_PATCH["custom"], "format": {
        "type": "grammar", "grammar": {"syntax": "lark", "definition": "start: /.+/"}}}}
    cases = [
        ({"tools": [grammar]}, "tools.0.custom.format", "grammar"),
        ({"tools": [CHAT_WEATHER], "tool_choice": {"type": "custom", "custom": {"name": "get_weather"}}},
         "tool_choice", "custom"),
        ({"tools": [APPLY_PATCH, {"type": "function", "function": {"name": "apply_patch"}}]}, "tools",
         "unique"),
        ({"tools": [{"type": "web_search"}]}, "tools.0.type", "'web_search' are not supported"),
    ]
    for body, param, words in cases:
        response = _post(srv, "/v1/chat/completions", {"messages": ADD, **body})
        assert response.status_code == 400, (body, response.text)
        error = response.json()["error"]
        assert error["param"] == param and words in error["message"], (body, error)


RUN = {"type": "function", "function": {"name": "run", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
ECHO = "make test && echo 'Observation: done'"
STOP_IN_CALL = (f"Checking.\n</think>\n\n<tool_call>\n<function=run>\n<parameter=command>\n{ECHO}\n</parameter>\n"
                "</function>\n</tool_call>")


def test_a_stop_string_inside_a_tool_call_does_not_cut_the_call(scripted_server):
    """A stop string (a ReAct agent's "Observation:", a chat UI's user-set stops) that a tool call's arguments
    happened to contain ended the reply inside the call, which came back with its arguments cut
    ('{"command": "make test && echo \\'') under finish_reason "tool_calls", as if whole: the agent ran a broken
    command or failed on the JSON. Stop strings end the text of the reply; inside a call's markup they are not
    looked for, under every engine. Outside it they still end the reply."""
    _script(scripted_server, STOP_IN_CALL)
    client = openai.OpenAI(base_url=scripted_server.base_url + "/v1", api_key="unused", max_retries=0)
    ask = [{"role": "user", "content": "Run the tests."}]
    for engine in ("raw", "mtp", "ddtree"):
        reply = client.chat.completions.create(model="default", messages=ask, tools=[RUN], stop=["Observation:"],
                                               max_tokens=200, extra_body={"engine": engine})
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls", (engine, choice)
        assert [json.loads(c.function.arguments) for c in choice.message.tool_calls] == [{"command": ECHO}], engine
    _script(scripted_server, "Checking.\n</think>\n\nThe tests pass. Observation: all green.")
    reply = client.chat.completions.create(model="default", messages=ask, tools=[RUN], stop=["Observation:"],
                                           max_tokens=200)
    assert (reply.choices[0].message.content, reply.choices[0].finish_reason) == ("The tests pass. ", "stop")


@pytest.mark.parametrize("size", [1, 2, 3, 5, 1000])
def test_stop_strings_are_not_looked_for_inside_calls_split_anyhow(size):
    """The call markers are found wherever the chunks split them (a template whose markers are several
    tokens), and a reply that starts inside a call (a forced call) skips it too."""
    from engines.text import StopMatcher

    def run(text: str, in_call: bool = False) -> tuple[str, bool]:
        call = ("<tool_call>", "</tool_call>")
        matcher, out = StopMatcher(["STOP"], [("<think>", "</think>"), call], call if in_call else None), ""
        for at in range(0, len(text), size):
            piece, stopped = matcher.feed(text[at:at + size])
            out += piece
            if stopped:
                return out, True
        return out + matcher.flush(), False

    text = 'Sure.<tool_call>{"a": "x STOP y"}</tool_call><tool_call>{"b": "STOP"}</tool_call> then STOP here'
    assert run(text) == (text[:text.rindex("STOP")], True)
    assert run('{"a": "STOP"}</tool_call>STOP', in_call=True) == ('{"a": "STOP"}</tool_call>', True)
    assert run("no call, STOP <tool_call>") == ("no call, ", True)
    assert run("<tool_cSTOP") == ("<tool_c", True)
    assert run("<think>a STOP</think>b STOP") == ("<think>a STOP</think>b ", True)


def test_unsupported_tool_shapes_say_what_is_wrong(srv):
    """An image in a Responses tool output was "output.0.type: Input should be 'input_text', 'output_text' or
    'text'" (chat and Anthropic tool results say it is a text-only model), and a custom tool_choice written in
    the Responses' flat shape on chat was "tool_choice.type: Input should be 'function'", though custom is
    accepted: each now names what is wrong."""
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"}
    image = [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]
    response = _post(srv, "/v1/responses", {"input": [
        {"role": "user", "content": "hi"}, call, {"type": "function_call_output", "call_id": "c1", "output": image}]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "'input_image' are not supported (text-only model)" in error["message"], error
    assert error["param"] == "input.2.output", error

    flat = _post(srv, "/v1/chat/completions", {"messages": ADD, "tools": [APPLY_PATCH],
                                               "tool_choice": {"type": "custom", "name": "apply_patch"}})
    assert flat.status_code == 400, flat.text
    assert flat.json()["error"]["param"] == "tool_choice.custom", flat.json()
    mode = _post(srv, "/v1/chat/completions", {"messages": ADD, "tools": [CHAT_WEATHER], "tool_choice": "any"})
    assert mode.status_code == 400 and "'required'" in mode.json()["error"]["message"], mode.json()
    # a `type` that is no string (schemathesis sent these) is a 400, not a 500 of a failed lookup
    odd = _post(srv, "/v1/chat/completions", {"messages": ADD, "tool_choice": {"type": {}}})
    assert odd.status_code == 400 and odd.json()["error"]["param"] == "tool_choice.type", odd.json()
    odd = _post(srv, "/v1/responses", {"input": [{"type": [None]}]})
    assert odd.status_code == 400 and odd.json()["error"]["param"] == "input.0", odd.json()


def test_chat_logprobs_are_the_contents_not_the_thinkings_or_the_calls(scripted_server):
    """Chat logprobs covered every generated token, the thinking and the tool-call markup included (105
    entries for a call-only reply whose content is null), so a client that lines them up with the content
    (perplexity, confidence of an answer) read the wrong tokens. Like OpenAI's (and /v1/responses'), they now
    cover the message content only, whole and streamed, under every engine; usage still counts every token."""
    _script(scripted_server, "The user asks about weather.\n</think>\n\nIt is sunny.\n\n" + _xml_call("Paris"))
    client = _openai(scripted_server)
    ask = dict(model="default", messages=HI, tools=[CHAT_WEATHER], logprobs=True, top_logprobs=1)
    for engine in ("raw", "mtp", "ddtree"):
        reply = client.chat.completions.create(**ask, extra_body={"engine": engine})
        choice = reply.choices[0]
        assert choice.message.content == "It is sunny." and choice.message.tool_calls, engine
        assert "".join(lp.token for lp in choice.logprobs.content).rstrip() == "It is sunny.", engine
        assert reply.usage.completion_tokens > len(choice.logprobs.content), engine
        chunks = list(client.chat.completions.create(**ask, stream=True, extra_body={"engine": engine}))
        streamed = [lp.token for c in chunks if c.choices and c.choices[0].logprobs
                    for lp in c.choices[0].logprobs.content or []]
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert "".join(streamed).rstrip() == content == "It is sunny.", engine   # as streamed


def test_a_responses_shaped_tool_sent_to_chat_says_which_shape_chat_takes(srv):
    """A client that speaks both APIs sent its flat Responses tool ({type, name, parameters}) to chat and got
    "tools.0.function: Field required", with no word of the shape chat takes."""
    flat_tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    with pytest.raises(openai.BadRequestError) as refused:
        _openai(srv).chat.completions.create(model="default", messages=ADD, tools=[flat_tool])
    error = refused.value.body
    assert error["param"] == "tools.0" and "Responses API's flat shape" in error["message"], error
    assert '"function": {"name"' in error["message"], error


def test_a_stop_string_in_the_thinking_does_not_end_the_reply(scripted_server):
    """A stop string the model wrote while thinking (a paragraph break, a code fence it drafted) ended the
    reply there: the client got an empty answer with finish_reason "stop", under a thinking model for every
    request with such a stop. Stop strings end the answer's text; the thinking block is not searched."""
    _script(scripted_server, "Draft:\n```\nprint(1)\n```\nGood.\n</think>\n\nHere:\n```\nprint(1)\n```\nDone.")
    client = openai.OpenAI(base_url=scripted_server.base_url + "/v1", api_key="unused", max_retries=0)
    for engine in ("raw", "mtp", "ddtree"):
        reply = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Code?"}],
                                               stop=["```"], max_tokens=200, extra_body={"engine": engine})
        choice = reply.choices[0]
        assert (choice.message.content, choice.finish_reason) == ("Here:\n", "stop"), (engine, choice.message)
        assert choice.message.reasoning_content == "Draft:\n```\nprint(1)\n```\nGood.\n", engine
