"""SIGTERM (what launchd/systemd send): the server stops admitting, lets admitted generations finish
within the drain timeout, cancels the rest so every stream still ends cleanly, saves the monitor
state, and exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.ops_helpers import REPO, free_port

STEP_SECONDS = 0.05


class GatewayProcess:
    def __init__(self, tmp_path: Path, drain_seconds: float):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.state = tmp_path / "state" / "router_state.json"
        self.log_path = tmp_path / "server.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.ops_serve_fake", "--port", str(self.port), "--policy",
             str(tmp_path / "policy.yaml"), "--state", str(self.state), "--drain", str(drain_seconds),
             "--step", str(STEP_SECONDS)],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.log()
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "gateway did not start:\n" + self.log()
            time.sleep(0.1)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def _stream_events(response: httpx.Response):
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield line[len("data: "):]


def _sigterm_during_stream(gateway: GatewayProcess, max_tokens: int) -> tuple[list[str], float]:
    """Start a stream, SIGTERM after its first content, read it to the end. Returns (data payloads, exit seconds)."""
    body = {"messages": [{"role": "user", "content": "code"}], "max_tokens": max_tokens, "stream": True,
            "engine": "mtp"}
    events: list[str] = []
    with httpx.stream("POST", gateway.base + "/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        for payload in _stream_events(response):
            events.append(payload)
            if len(events) == 3:
                gateway.proc.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                _assert_admission_stops(gateway)
    assert gateway.proc.wait(timeout=30) == 0, gateway.log()
    return events, time.monotonic() - signalled


def _assert_admission_stops(gateway: GatewayProcess) -> None:
    """Within a moment of SIGTERM (uvicorn checks its exit flag every 0.1 s) nothing new gets in:
    the listening socket is closed (connection refused) or the request is refused with 503."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            response = httpx.post(gateway.base + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=2)
        except httpx.TransportError:
            return
        if response.status_code == 503:
            return
        time.sleep(0.05)
    raise AssertionError("the server still admitted new requests 2 s after SIGTERM")


def _finish_reason(events: list[str]) -> str | None:
    reasons = [json.loads(e)["choices"][0]["finish_reason"] for e in events if e != "[DONE]" and json.loads(e).get("choices")]
    return reasons[-1]


def _assert_state_saved(gateway: GatewayProcess) -> None:
    state = json.loads(gateway.state.read_text())
    assert state["arms"]["code/mtp/sampled"]["steps"] >= 3, state  # no temperature: sampled at the default


def test_sigterm_cancels_a_long_stream_cleanly_at_the_drain_timeout(tmp_path):
    gateway = GatewayProcess(tmp_path, drain_seconds=1.0)
    try:
        queued: dict[str, httpx.Response] = {}

        def waiting_request() -> None:  # queued behind the stream: admitted, never started
            queued["response"] = httpx.post(gateway.base + "/v1/completions", timeout=60,
                                            json={"prompt": "prose", "max_tokens": 5})

        body = {"messages": [{"role": "user", "content": "code"}], "max_tokens": 300, "stream": True,
                "engine": "mtp"}
        events: list[str] = []
        with httpx.stream("POST", gateway.base + "/v1/chat/completions", json=body, timeout=60) as response:
            assert response.status_code == 200
            behind = threading.Thread(target=waiting_request)
            for payload in _stream_events(response):
                events.append(payload)
                if len(events) == 2:
                    behind.start()
                    time.sleep(0.3)
                    gateway.proc.send_signal(signal.SIGTERM)
                    signalled = time.monotonic()
            behind.join(timeout=30)
        exit_code = gateway.proc.wait(timeout=30)
        took = time.monotonic() - signalled
        assert exit_code == 0, gateway.log()
        # a clean end: whole JSON frames, then the [DONE] terminator (no finish_reason: it was cut short)
        assert events[-1] == "[DONE]"
        assert _finish_reason(events) is None
        assert len(events) < 300                      # cut short, not run to max_tokens
        assert 0.9 <= took < 6.0, took                # drain timeout 1 s, hard stop at 6 s
        assert queued["response"].status_code == 503
        assert queued["response"].json()["error"]["code"] == "worker_unavailable"
        assert "cancelled 2 request(s)" in gateway.log()
        _assert_state_saved(gateway)
    finally:
        gateway.close()


def test_sigterm_lets_a_short_stream_finish(tmp_path):
    gateway = GatewayProcess(tmp_path, drain_seconds=20.0)
    try:
        events, took = _sigterm_during_stream(gateway, max_tokens=30)   # ~1.5 s of generation
        assert events[-1] == "[DONE]"
        assert _finish_reason(events) == "length"
        assert sum(1 for e in events if e != "[DONE]" and json.loads(e)["choices"][0]["delta"].get("content")) == 30
        assert took < 10.0, took                      # exits once drained, long before the 20 s timeout
        _assert_state_saved(gateway)
    finally:
        gateway.close()
