"""Request limits (docs/limits.md): every one configurable, every violation a clean OpenAI error."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from gateway.config import GatewayConfig
from gateway.http.app import create_app
from gateway.http import request_spec
from tests.fakes import FakeBackend, live_server
from tests.test_gateway_validation import assert_error

CHAT = "/v1/chat/completions"
LONG_REPLY = " ".join(f"w{i}" for i in range(200))


def chat(**extra) -> dict:
    return {"messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.fixture(scope="module")
def server():
    backend = FakeBackend()
    config = GatewayConfig(max_body_bytes=64 * 1024, max_tokens_limit=100, default_max_tokens=512,
                           max_stop_chars=8, max_messages=5)
    with live_server(create_app(backend, config=config)) as srv:
        srv.backend = backend
        yield srv


@pytest.mark.parametrize("path,field", [(CHAT, "max_tokens"), (CHAT, "max_completion_tokens"),
                                        ("/v1/completions", "max_tokens")])
def test_max_tokens_over_the_cap_is_a_400(server, path, field):
    body = chat() if path == CHAT else {"prompt": "hi"}
    assert_error(httpx.post(server.base_url + path, json={**body, field: 101}), 400, param=field, code="invalid_value")
    assert httpx.post(server.base_url + path, json={**body, field: 100}).status_code == 200
    assert server.backend.calls[-1]["params"].max_tokens == 100


def test_default_max_tokens_is_capped_too(server):
    assert httpx.post(server.base_url + CHAT, json=chat()).status_code == 200
    assert server.backend.calls[-1]["params"].max_tokens == 100


def test_stop_sequence_length_and_message_count(server):
    assert_error(httpx.post(server.base_url + CHAT, json=chat(stop=["x" * 9])), 400, param="stop")
    assert httpx.post(server.base_url + CHAT, json=chat(stop=["x" * 8])).status_code == 200
    six = [{"role": "user", "content": "m"}] * 6
    assert_error(httpx.post(server.base_url + CHAT, json={"messages": six}), 400, param="messages")
    assert httpx.post(server.base_url + CHAT, json={"messages": six[:5]}).status_code == 200


def test_body_limit_holds_without_content_length(server):
    """A chunked upload is cut off at the limit while it streams in (nothing unbounded is buffered)."""
    sent = []

    def chunks():
        for _ in range(1000):  # 1000 x 1 KiB: far over the 64 KiB limit
            sent.append(1)
            yield b" " * 1024

    response = httpx.post(server.base_url + CHAT, content=chunks(), headers={"content-type": "application/json"})
    assert_error(response, 413, code="request_too_large")


def test_huge_inputs_inside_the_body_limit_are_bounded(server):
    many_messages = {"messages": [{"role": "user", "content": "x"}] * 1500}
    assert_error(httpx.post(server.base_url + CHAT, json=many_messages), 400, param="messages")
    assert_error(httpx.post(server.base_url + CHAT, content=b"[" * 60_000, headers={"content-type": "application/json"}),
                 400, code="invalid_json")
    many_parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}] * 1500}], "max_tokens": 1}
    assert httpx.post(server.base_url + CHAT, json=many_parts).status_code == 200  # bounded by the body size
    giant_stop = chat(stop=["s" * 60_000])
    assert_error(httpx.post(server.base_url + CHAT, json=giant_stop), 400, param="stop")


def test_prompt_over_the_context_is_context_length_exceeded():
    backend = FakeBackend(context_length=50)
    with live_server(create_app(backend)) as srv:
        for stream in (False, True):
            response = httpx.post(srv.base_url + CHAT, json=chat(messages=[{"role": "user", "content": "y" * 80}],
                                                                  stream=stream))
            assert_error(response, 400, code="context_length_exceeded")


def _sse_events(text: str) -> list:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


def test_request_timeout_stops_the_generation_with_a_504():
    backend = FakeBackend(reply=LONG_REPLY, step_seconds=0.05, poll_cancel=False)
    with live_server(create_app(backend, config=GatewayConfig(request_timeout_seconds=0.3))) as srv:
        response = httpx.post(srv.base_url + CHAT, json=chat(max_tokens=150), timeout=30)
        assert_error(response, 504, code="request_timeout")
        assert backend.steps_run[-1] <= 0.3 / 0.05 + 2  # stopped within a step of the deadline, not at 150

        streamed = httpx.post(srv.base_url + CHAT, json=chat(max_tokens=150, stream=True), timeout=30)
        assert streamed.status_code == 200
        events = _sse_events(streamed.text)
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["code"] == "request_timeout" and error["type"] == "server_error"
        assert any('"content"' in e for e in events[:-2])          # partial output came first
        assert backend.steps_run[-1] <= 0.3 / 0.05 + 2
        # the server is healthy and the slot is free
        assert httpx.get(srv.base_url + "/health").status_code == 200
        assert httpx.post(srv.base_url + CHAT, json=chat(max_tokens=2), timeout=30).status_code == 200
        metrics = httpx.get(srv.base_url + "/metrics").text
        assert 'status="504"' in metrics


def test_request_timeout_counts_queue_wait():
    gate = threading.Event()
    backend = FakeBackend(gate=gate)
    app = create_app(backend, config=GatewayConfig(request_timeout_seconds=0.3))
    scheduler = app.state.gateway.scheduler
    with live_server(app) as srv:
        results: dict[str, httpx.Response] = {}
        first = threading.Thread(target=lambda: results.setdefault("a", httpx.post(srv.base_url + CHAT, json=chat(), timeout=30)))
        first.start()
        backend.started.wait(10)
        second = threading.Thread(target=lambda: results.setdefault("b", httpx.post(srv.base_url + CHAT, json=chat(), timeout=30)))
        second.start()
        deadline = time.monotonic() + 10
        while scheduler.waiting < 1:      # the second request is admitted and queued
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.5)                   # ... and past its deadline before the worker frees up
        gate.set()
        first.join(30)
        second.join(30)
        assert_error(results["b"], 504, code="request_timeout")
        assert len(backend.calls) == 1   # the expired request never reached the model


def test_limits_are_cli_flags(tmp_path):
    import argparse

    from gateway.cli import serve as serve_cli

    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "--max-body-bytes", "2048", "--max-tokens-limit", "64", "--default-max-tokens",
                              "32", "--max-stop-sequences", "3", "--max-messages", "7", "--request-timeout", "0"])
    config = serve_cli._config_from_args(args)
    assert (config.max_body_bytes, config.max_tokens_limit, config.default_max_tokens, config.max_stop_sequences,
            config.max_messages, config.request_timeout_seconds) == (2048, 64, 32, 3, 7, None)


def test_unasked_max_tokens_shrinks_to_the_room_left_in_the_context():
    backend = FakeBackend(context_length=100)
    with live_server(create_app(backend)) as srv:
        assert httpx.post(srv.base_url + "/v1/completions", json={"prompt": "p" * 90}).status_code == 200
        assert backend.calls[-1]["params"].max_tokens == 10          # 100 - 90 prompt tokens, not 512
        asked = httpx.post(srv.base_url + "/v1/completions", json={"prompt": "p" * 90, "max_tokens": 50})
        # asked for: not shortened but refused, before the backend runs (every prompt of a batch is checked first)
        assert asked.status_code == 400 and asked.json()["error"]["code"] == "context_length_exceeded"
        assert backend.calls[-1]["params"].max_tokens == 10
        assert httpx.post(srv.base_url + "/v1/completions", json={"prompt": "p" * 5}).status_code == 200
        assert backend.calls[-1]["params"].max_tokens == 95


def test_bodies_read_at_once_are_bounded():
    """Slow uploads hold body slots; when all are taken the next request gets 429 at once, so at most
    slots x max_body_bytes is ever buffered, however many clients upload together."""
    from gateway.http.admission import body_slots

    backend = FakeBackend()
    app = create_app(backend, config=GatewayConfig(max_queue=0))
    budget = app.state.body_budget
    assert budget.slots == body_slots(0) == 4
    release = threading.Event()

    def slow_body():
        yield b'{"messages": [{"role": "user", "content": "hi"}], '
        release.wait(10)
        yield b'"max_tokens": 1}'

    with live_server(app) as srv:
        statuses: list[int] = []

        def upload():
            statuses.append(httpx.post(srv.base_url + CHAT, content=slow_body(), timeout=30,
                                       headers={"content-type": "application/json"}).status_code)

        uploads = [threading.Thread(target=upload) for _ in range(4)]
        for thread in uploads:
            thread.start()
        deadline = time.monotonic() + 10
        while budget.in_use < 4:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        refused = httpx.post(srv.base_url + CHAT, json=chat(max_tokens=1), timeout=30)
        assert_error(refused, 429, code="queue_full")
        assert refused.headers["retry-after"] == "1"
        release.set()
        for thread in uploads:
            thread.join(30)
        assert 200 in statuses and set(statuses) <= {200, 429}
        assert budget.in_use == 0
        assert httpx.post(srv.base_url + CHAT, json=chat(max_tokens=1), timeout=30).status_code == 200


def test_a_stalled_upload_gives_its_body_slot_back():
    """A client that sends headers and part of a body, then nothing (slowloris), holds a body slot only
    until the body-read deadline: then it gets a 408 and the slot frees, so a handful of stalled
    connections cannot answer every other client 429 for ever."""
    import socket

    backend = FakeBackend()
    app = create_app(backend, config=GatewayConfig(max_queue=0, body_read_timeout_seconds=1.0))
    budget = app.state.body_budget
    with live_server(app) as srv:
        host, port = srv.base_url.removeprefix("http://").split(":")
        stalled = []
        for _ in range(budget.slots):
            sock = socket.create_connection((host, int(port)))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"messages\":")
            stalled.append(sock)
        deadline = time.monotonic() + 10
        while budget.in_use < budget.slots:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert_error(httpx.post(srv.base_url + CHAT, json=chat(max_tokens=1), timeout=30), 429, code="queue_full")
        for sock in stalled:   # each stalled client is answered with a 408 error object at the deadline
            sock.settimeout(10)
            head = sock.recv(65536)
            assert head.startswith(b"HTTP/1.1 408"), head[:200]
            assert b'"code":"body_timeout"' in head.replace(b" ", b"") or b"body_timeout" in sock.recv(65536)
            sock.close()
        assert budget.in_use == 0
        assert httpx.post(srv.base_url + CHAT, json=chat(max_tokens=1), timeout=30).status_code == 200


def test_compiling_a_json_schema_does_not_block_the_event_loop(monkeypatch):
    """A large response_format schema takes llguidance a while to check (about 1 s per MiB of regex
    alternatives here): that runs off the event loop, so other clients' streams and /health go on."""
    import llguidance

    entered, go = threading.Event(), threading.Event()
    check = llguidance.LLMatcher.validate_grammar

    def slow_check(grammar):
        entered.set()
        go.wait(10)
        return check(grammar)

    monkeypatch.setattr(llguidance.LLMatcher, "validate_grammar", staticmethod(slow_check))
    request_spec._compiled.cache_clear()   # compiled grammars are cached by schema: make this one compile
    with live_server(create_app(FakeBackend())) as srv:
        statuses = []
        schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
        client = threading.Thread(target=lambda: statuses.append(httpx.post(
            srv.base_url + CHAT, json=chat(max_tokens=1, response_format=schema), timeout=30).status_code))
        client.start()
        assert entered.wait(10)
        try:
            assert httpx.get(srv.base_url + "/health", timeout=3).status_code == 200
        finally:
            go.set()
            client.join(30)
        assert statuses == [200]


def test_a_full_queue_refuses_before_reading_the_body():
    gate = threading.Event()
    backend = FakeBackend(gate=gate)
    with live_server(create_app(backend, config=GatewayConfig(max_queue=0))) as srv:
        running = threading.Thread(target=lambda: httpx.post(srv.base_url + CHAT, json=chat(max_tokens=1), timeout=30))
        running.start()
        backend.started.wait(10)
        refused = httpx.post(srv.base_url + CHAT, content=b"not even json", timeout=30,
                             headers={"content-type": "application/json"})
        assert_error(refused, 429, code="queue_full")   # refused without parsing: 429, not 400
        gate.set()
        running.join(30)
