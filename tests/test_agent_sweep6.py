"""A sixth agent sweep: what coding agents and chat UIs hit (streams queued under load, custom tools on chat
completions, ...), reproduced with the openai / anthropic SDKs against a served gateway. Each test is a gap
the sweep found."""

from __future__ import annotations

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
        threading.Timer(1.5, backend.gate.set).start()

        impatient = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=0.8)
        stream = impatient.chat.completions.create(model="default", messages=HI, stream=True)
        assert scheduler.waiting == 1
        # the queue is full: one more is a 429, so the stream above really waits in it
        assert _post(server, "/v1/chat/completions", {"messages": HI}).status_code == 429
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "It is sunny."
        busy.join()

        backend.gate.clear()
        backend.started.clear()
        busy = threading.Thread(target=_post, args=(server, "/v1/chat/completions", {"messages": HI}))
        busy.start()
        _wait_until(backend.started.is_set)
        threading.Timer(0.8, backend.gate.set).start()
        with httpx.stream("POST", server.base_url + "/v1/chat/completions", json={
                "model": "default", "stream": True, "messages": HI}) as response:
            lines = [line for line in response.iter_lines() if line]
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
        threading.Timer(0.8, backend.gate.set).start()
        with pytest.raises(openai.BadRequestError) as overflow:   # 200 + an in-stream error would be APIError
            list(_openai(server).chat.completions.create(model="default", messages=HI, stream=True,
                                                         max_tokens=backend.context_length))
        assert overflow.value.code == "context_length_exceeded" and scheduler.waiting == 0
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
