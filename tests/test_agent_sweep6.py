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
