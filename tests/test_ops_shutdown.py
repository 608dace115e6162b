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


def _serve_and_stop(model_dir: Path, extra: list[str], cycles: int, log_dir: Path) -> list[tuple[int, str]]:
    """Start `switchyard serve` on `model_dir`, optionally run requests (every engine, some still in
    flight), SIGTERM it, and collect (exit status, log tail) per cycle."""
    results = []
    for cycle in range(cycles):
        port = free_port()
        log_path = log_dir / f"serve-{model_dir.parent.name}-{cycle}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--model", str(model_dir), "--port", str(port),
                 "--log-level", "warning", *extra],
                cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT)
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    if httpx.get(base + "/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.05)
            body = {"prompt": "def f(x):", "max_tokens": 24, "temperature": 0}
            threads = []
            if cycle % 3 == 1:      # compiled tree/chain verifies and async drafts ran on the worker
                for engine in ("mtp", "ddtree"):
                    httpx.post(base + "/v1/completions", json={**body, "engine": engine}, timeout=60)
            elif cycle % 3 == 2:    # SIGTERM while generations are in flight
                threads = [threading.Thread(target=lambda e=e: httpx.post(
                    base + "/v1/completions", json={**body, "max_tokens": 200, "engine": e}, timeout=60))
                    for e in ("ddtree", "mtp")]
                for thread in threads:
                    thread.start()
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
            for thread in threads:
                thread.join(timeout=60)
        results.append((code, log_path.read_text()[-1500:]))
    return results


def test_every_stop_of_a_real_server_exits_zero(tmp_path):
    """20 start/stop cycles of `switchyard serve` on a float32 and on a 4-bit generated family (MTP
    head + DFlash drafter): every stop must exit 0 (launchd/systemd would record anything else as a
    crash), whatever ran on the worker thread before it."""
    from mlx_lm import convert

    from engines.testing import write_drafter_checkpoint, write_target_checkpoint

    f32 = write_target_checkpoint(tmp_path / "f32" / "target", seed=0, variant="agree")
    q4 = tmp_path / "q4" / "target"   # like an mlx-community conversion: mtp.* stripped, head from the original
    convert(str(f32), mlx_path=str(q4), quantize=True, q_bits=4, q_group_size=32)
    for target in (f32, q4):
        write_drafter_checkpoint(target.parent / "drafter", f32, seed=0, variant="agree")
    families = {"f32": (f32, []), "q4": (q4, ["--mtp-weights", str(f32)])}
    outcomes: dict[str, list[tuple[int, str]]] = {}
    runners = [threading.Thread(target=lambda n=n, t=t, x=x: outcomes.__setitem__(n, _serve_and_stop(t, x, 20, tmp_path)))
               for n, (t, x) in families.items()]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join()
    for name, results in outcomes.items():
        assert len(results) == 20
        failures = [(i, code, tail) for i, (code, tail) in enumerate(results) if code != 0]
        assert not failures, f"{name}: {failures[:2]}"
