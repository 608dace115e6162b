"""Scheduler behaviour through the real server: bounded FIFO, 429, cancellation on disconnect, failures."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from contracts.errors import EngineFailure
from gateway.config import GatewayConfig
from gateway.http.app import create_app
from tests.fakes import DEFAULT_REPLY, FakeBackend, RecordingRouter, live_server

CHAT = "/v1/chat/completions"
N_WORDS = len(DEFAULT_REPLY.split())


def chat(prompt: str, **extra) -> dict:
    return {"messages": [{"role": "user", "content": prompt}], **extra}


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


class Background:
    """Send one request on a thread; keep the response (or the exception)."""

    def __init__(self, url: str, body: dict, timeout: float = 30.0):
        self.result: httpx.Response | BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(url, body, timeout), daemon=True)
        self.thread.start()

    def _run(self, url, body, timeout):
        try:
            self.result = httpx.post(url, json=body, timeout=timeout)
        except BaseException as exc:  # noqa: BLE001
            self.result = exc

    def response(self) -> httpx.Response:
        self.thread.join(30)
        assert isinstance(self.result, httpx.Response), self.result
        return self.result


def test_queue_full_gets_429_with_retry_after_and_fifo_order():
    gate = threading.Event()
    backend = FakeBackend(gate=gate)
    app = create_app(backend, config=GatewayConfig(max_queue=2, retry_after_seconds=3))
    scheduler = app.state.gateway.scheduler
    with live_server(app) as server:
        url = server.base_url + CHAT
        running = Background(url, chat("p0", max_tokens=2))
        wait_until(backend.started.is_set)
        queued = []
        for i in (1, 2):
            queued.append(Background(url, chat(f"p{i}", max_tokens=2)))
            wait_until(lambda: scheduler.waiting == i)
        assert httpx.get(server.base_url + "/health").json()["requests_waiting"] == 2
        full = httpx.post(url, json=chat("p3"))
        assert full.status_code == 429
        assert full.headers["retry-after"] == "3"
        assert full.json()["error"]["code"] == "queue_full"
        assert full.json()["error"]["type"] == "rate_limit_error"
        gate.set()
        for request in (running, *queued):
            assert request.response().status_code == 200
        # FIFO: the backend saw the prompts in arrival order
        assert [c["prompt_ids"][-len("p0<|assistant|>"):] for c in backend.calls] == [
            [ord(ch) % 1000 for ch in f"p{i}<|assistant|>"] for i in range(3)
        ]
        assert scheduler.waiting == 0 and scheduler.running == 0


def test_router_sees_queue_depth_at_admission():
    gate = threading.Event()
    backend = FakeBackend(gate=gate)
    router = RecordingRouter()
    app = create_app(backend, router=router, config=GatewayConfig(max_queue=4))
    with live_server(app) as server:
        url = server.base_url + CHAT
        first = Background(url, chat("a", max_tokens=1))
        wait_until(backend.started.is_set)
        second = Background(url, chat("b", max_tokens=1))
        wait_until(lambda: app.state.gateway.scheduler.waiting == 1)
        third = Background(url, chat("c", max_tokens=1))
        wait_until(lambda: app.state.gateway.scheduler.waiting == 2)
        gate.set()
        for request in (first, second, third):
            assert request.response().status_code == 200
    assert [r.queue_depth for r in router.requests] == [0, 0, 1]


def test_streaming_disconnect_cancels_within_one_step():
    backend = FakeBackend(step_seconds=0.05, poll_cancel=False)  # the gateway alone must stop it
    router = RecordingRouter()
    app = create_app(backend, router=router)
    with live_server(app) as server:
        with httpx.Client(timeout=10) as client:
            with client.stream("POST", server.base_url + CHAT, json=chat("go", stream=True)) as response:
                assert response.status_code == 200
                lines = response.iter_lines()
                content = 0
                for line in lines:
                    if line.startswith("data: ") and '"content":"' in line and '"content":""' not in line:
                        content += 1
                        if content == 2:
                            break
            # leaving the block closes the connection mid-stream
        wait_until(lambda: backend.steps_run, timeout=5)
        assert backend.steps_after_cancel == [0]
        assert backend.steps_run[0] < N_WORDS
        wait_until(lambda: router.finished_calls, timeout=5)
        assert router.finished_calls[0][1] is None  # cancellation is not an engine error
        # the server is free again
        assert httpx.post(server.base_url + CHAT, json=chat("next", max_tokens=1)).status_code == 200
        text = httpx.get(server.base_url + "/metrics").text
        assert 'switchyard_client_disconnects_total{endpoint="chat_completions"} 1.0' in text


def test_non_streaming_disconnect_cancels_within_one_step():
    backend = FakeBackend(step_seconds=0.05, poll_cancel=False)
    with live_server(create_app(backend)) as server:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.base_url + CHAT, json=chat("go"), timeout=0.2)
        wait_until(lambda: backend.steps_run, timeout=5)
        assert backend.steps_after_cancel == [0]
        assert backend.steps_run[0] < N_WORDS


def test_disconnect_while_queued_frees_the_slot():
    gate = threading.Event()
    backend = FakeBackend(gate=gate)
    app = create_app(backend, config=GatewayConfig(max_queue=1))
    scheduler = app.state.gateway.scheduler
    with live_server(app) as server:
        url = server.base_url + CHAT
        running = Background(url, chat("a", max_tokens=1))
        wait_until(backend.started.is_set)
        impatient = Background(url, chat("b", max_tokens=1), timeout=0.3)
        impatient.thread.join(5)
        assert isinstance(impatient.result, httpx.ReadTimeout)
        wait_until(lambda: scheduler.waiting == 0, timeout=5)
        patient = Background(url, chat("c", max_tokens=1))
        wait_until(lambda: scheduler.waiting == 1)
        gate.set()
        assert running.response().status_code == 200
        assert patient.response().status_code == 200
    assert len(backend.calls) == 2  # the cancelled request never reached the model


def test_all_backend_calls_run_on_the_one_worker_thread():
    backend = FakeBackend()
    app = create_app(backend)
    with live_server(app) as server:
        for i in range(3):
            httpx.post(server.base_url + CHAT, json=chat(f"q{i}", max_tokens=1))
            httpx.post(server.base_url + "/v1/completions", json={"prompt": f"q{i}", "max_tokens": 1})
        worker = app.state.gateway.scheduler.worker_thread
        assert backend.threads == {worker.ident}
        assert worker is not threading.main_thread() and worker is not server.thread
        assert backend.ended_threads == []
    # on shutdown the worker ends its model work itself, on its own thread, before it exits (MLX
    # frees per-thread streams only when that thread asks: Runtime.end_thread)
    assert not worker.is_alive() and backend.ended_threads == [worker.ident]


def test_engine_failure_mid_stream_is_an_in_stream_error_then_done():
    backend = FakeBackend(fail_after_steps=2)
    router = RecordingRouter()
    with live_server(create_app(backend, router=router)) as server:
        with httpx.stream("POST", server.base_url + CHAT, json=chat("x", stream=True)) as response:
            assert response.status_code == 200
            assert response.headers["x-switchyard-engine"] == "mtp"
            frames = [line for line in response.iter_lines() if line]
        assert frames[-1] == "data: [DONE]"
        error = json.loads(frames[-2].removeprefix("data: "))
        assert set(error) == {"error"}
        assert error["error"]["code"] == "engine_failure" and error["error"]["type"] == "server_error"
        assert "Traceback" not in "".join(frames)
        contents = [json.loads(f[6:])["choices"][0]["delta"].get("content") for f in frames[:-2]]
        assert "".join(c or "" for c in contents) == "The quick"
        assert isinstance(router.finished_calls[-1][1], EngineFailure)
        assert httpx.get(server.base_url + "/health").status_code == 200  # one request failed, not the server


def test_engine_failure_before_output_is_a_json_error_with_route_headers():
    backend = FakeBackend(fail_after_steps=0)
    with live_server(create_app(backend, router=RecordingRouter())) as server:
        for stream in (False, True):
            response = httpx.post(server.base_url + CHAT, json=chat("x", stream=stream))
            assert response.status_code == 500
            assert response.json()["error"]["code"] == "engine_failure"
            assert response.headers["x-switchyard-engine"] == "mtp"
            assert response.headers["x-switchyard-route-reason"] == "monitor"
        backend.fail_after_steps = 3
        response = httpx.post(server.base_url + CHAT, json=chat("x"))
        assert response.status_code == 500 and response.headers["x-switchyard-class"] == "code"


def test_worker_crash_turns_health_to_503():
    backend = FakeBackend(fatal_after_steps=1)
    app = create_app(backend)
    with live_server(app) as server:
        assert httpx.get(server.base_url + "/health").status_code == 200
        response = httpx.post(server.base_url + CHAT, json=chat("x"))
        assert response.status_code in (500, 503) and "error" in response.json()
        health = httpx.get(server.base_url + "/health")
        assert health.status_code == 503
        assert health.json()["error"]["code"] == "worker_unavailable"
        after = httpx.post(server.base_url + CHAT, json=chat("y"))
        assert after.status_code == 503 and after.json()["error"]["code"] == "worker_unavailable"
        assert "switchyard_worker_up 0.0" in httpx.get(server.base_url + "/metrics").text


CRASHING_SERVER = """
import sys
from gateway.http.app import create_app
from gateway.config import GatewayConfig
from gateway.http.server import run_server
from tests.fakes import FakeBackend
config = GatewayConfig(port=int(sys.argv[1]))
sys.exit(run_server(create_app(FakeBackend(fatal_after_steps=1), config=config), config, log_level="warning"))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_worker_crash_makes_the_server_process_exit_non_zero():
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-c", CRASHING_SERVER, str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else ""
            time.sleep(0.1)
        httpx.post(base + CHAT, json=chat("boom"), timeout=10)
        code = proc.wait(timeout=30)
        assert code == 3
        assert "worker died" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_failing_router_fails_only_that_request():
    class FlakyRouter(RecordingRouter):
        def choose(self, request):
            if not self.requests:
                self.requests.append(request)
                raise RuntimeError("router bug")
            return super().choose(request)

    backend = FakeBackend()
    with live_server(create_app(backend, router=FlakyRouter())) as server:
        response = httpx.post(server.base_url + CHAT, json=chat("x", max_tokens=1))
        assert response.status_code == 500
        assert response.json()["error"]["code"] == "internal_error"
        assert "router bug" not in response.text and "Traceback" not in response.text
        assert httpx.get(server.base_url + "/health").status_code == 200
        assert httpx.post(server.base_url + CHAT, json=chat("y", max_tokens=1)).status_code == 200


def test_health_is_503_while_draining():
    gate = threading.Event()
    backend = FakeBackend(gate=gate)
    app = create_app(backend)
    scheduler = app.state.gateway.scheduler
    with live_server(app) as server:
        running = Background(server.base_url + CHAT, chat("a", max_tokens=1))
        wait_until(backend.started.is_set)
        scheduler.close_admission()
        health = httpx.get(server.base_url + "/health")
        assert health.status_code == 503 and "shutting down" in health.json()["error"]["message"]
        refused = httpx.post(server.base_url + CHAT, json=chat("b"))
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "worker_unavailable"
        gate.set()
        assert running.response().status_code == 200  # admitted work still finishes


def test_running_requests_interleave_one_step_each_per_round():
    """max_running > 1: the worker advances every running request by one step per round, so a request
    that arrives behind a long one starts streaming at once (and raw decoders can share a batch)."""
    backend = FakeBackend(step_seconds=0.02, reply=" ".join(f"w{i}" for i in range(30)))
    router = RecordingRouter()
    app = create_app(backend, router=router, config=GatewayConfig(max_running=3))
    with live_server(app) as server:
        url = server.base_url + CHAT
        first = Background(url, chat("first"))
        wait_until(backend.started.is_set)
        later = [Background(url, chat(f"later{i}", max_tokens=5)) for i in range(2)]
        for request in later:
            assert request.response().status_code == 200
        # both short requests finished while the long one was still running
        assert not first.thread.join(0) and first.result is None
        assert first.response().json()["usage"]["completion_tokens"] == 30
        assert app.state.gateway.scheduler.running == 0
    assert [r.concurrent for r in router.requests] == [0, 1, 2] or [r.concurrent for r in router.requests] == [0, 1, 1]
    assert len(router.observed) == 40


def test_queue_limit_counts_waiting_requests_behind_full_running_slots():
    backend = FakeBackend(step_seconds=0.1, reply=" ".join(f"w{i}" for i in range(40)))
    app = create_app(backend, config=GatewayConfig(max_running=2, max_queue=1))
    scheduler = app.state.gateway.scheduler
    with live_server(app) as server:
        url = server.base_url + CHAT
        running = [Background(url, chat(f"r{i}", max_tokens=20)) for i in range(2)]
        wait_until(lambda: scheduler.running == 2)
        queued = Background(url, chat("q", max_tokens=1))
        wait_until(lambda: scheduler.waiting == 1)
        full = httpx.post(url, json=chat("x", max_tokens=1))
        assert full.status_code == 429 and full.json()["error"]["code"] == "queue_full"
        scheduler.cancel_all()
        for request in (*running, queued):
            request.thread.join(30)
        wait_until(lambda: scheduler.idle)
        assert httpx.post(url, json=chat("after", max_tokens=1)).status_code == 200


def test_higher_priority_requests_leave_the_queue_first():
    gate = threading.Event()
    backend = FakeBackend(gate=gate)
    router = RecordingRouter()
    app = create_app(backend, router=router, config=GatewayConfig(max_queue=8))
    scheduler = app.state.gateway.scheduler
    with live_server(app) as server:
        url = server.base_url + CHAT
        first = Background(url, chat("first", max_tokens=1))
        wait_until(backend.started.is_set)
        queued = []
        for i, (name, body_priority, header) in enumerate((("low", None, None), ("high", 5, None),
                                                           ("header", None, "3"), ("body-wins", -2, "9"))):
            body = chat(name, max_tokens=1, **({"priority": body_priority} if body_priority is not None else {}))
            headers = {"X-Switchyard-Priority": header} if header else {}
            queued.append(threading.Thread(target=httpx.post, args=(url,), kwargs={"json": body, "headers": headers,
                                                                                    "timeout": 30}))
            queued[-1].start()
            wait_until(lambda: scheduler.waiting == i + 1)
        bad = httpx.post(url, json=chat("x"), headers={"X-Switchyard-Priority": "urgent"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "priority"
        assert httpx.post(url, json=chat("x", priority=5000)).status_code == 400
        gate.set()
        for thread in queued:
            thread.join(30)
        assert first.response().status_code == 200
    order = [next(m["content"] for m in c["messages"] if m["role"] == "user") for c in backend.chats]
    assert order == ["first", "high", "header", "low", "body-wins"]
