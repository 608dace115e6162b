"""Faults: an engine raising mid-request (real runtime), bad monitor state files at startup, policy
reloads under load. (A dying worker thread -> /health 503 and exit code 3 is
tests/test_gateway_scheduler.py::test_worker_crash_*.)"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from gateway.routing.monitor import Monitor
from tests.fakes import live_server
from tests.faults import inject
from tests.ops_helpers import REPO, SpeculativeFake, free_port, serve_like_app

CHAT = "/v1/chat/completions"

ALL_TO_MTP = """
exploration: {kind: none}
quarantine_seconds: 600
state: {path: null}
rules:
  - name: everything-to-mtp
    when: {classes: [code, prose, structured]}
    engine: mtp
"""


def sse_payloads(text: str) -> list[str]:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


def test_engine_fault_mid_stream_is_clean_quarantines_and_reroutes(tiny_target, tiny_drafter, tmp_path):
    from engines.runtime import load_runtime
    from gateway.http.app import create_app
    from gateway.routing.router import AdaptiveRouter

    runtime = load_runtime(tiny_target, draft_dir=tiny_drafter)
    policy = tmp_path / "policy.yaml"
    policy.write_text(ALL_TO_MTP)
    router = AdaptiveRouter.from_policy_file(policy, runtime.engine_names, classifier=None)
    faulty = inject(runtime, "mtp", after_steps=2)
    body = {"messages": [{"role": "user", "content": "Tell me about rivers."}], "max_tokens": 16,
            "temperature": 0, "stream": True}
    with live_server(create_app(runtime, router=router)) as server:
        streamed = httpx.post(server.base_url + CHAT, json=body, timeout=120)
        assert streamed.status_code == 200
        assert streamed.headers["x-switchyard-engine"] == "mtp"
        payloads = sse_payloads(streamed.text)
        assert payloads[-1] == "[DONE]"
        error = json.loads(payloads[-2])["error"]
        assert error == {"message": error["message"], "type": "server_error", "param": None, "code": "engine_failure"}
        assert "Traceback" not in streamed.text and "injected" not in streamed.text  # no internals leak
        assert any(json.loads(p).get("choices") for p in payloads[:-2])               # output before the fault
        assert faulty.faults == 1

        assert "mtp" in router.quarantined()
        for stream in (False, True):
            after = httpx.post(server.base_url + CHAT, json={**body, "stream": stream}, timeout=120)
            assert after.status_code == 200
            assert after.headers["x-switchyard-engine"] != "mtp"
            assert after.headers["x-switchyard-route-reason"] == "health"
            if stream:
                assert sse_payloads(after.text)[-1] == "[DONE]" and '"error"' not in after.text
        assert faulty.faults == 1
        health = httpx.get(server.base_url + "/health", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        metrics = httpx.get(server.base_url + "/metrics", timeout=10).text
        assert 'switchyard_finish_reasons_total{reason="error"} 1.0' in metrics


class FakeServeProcess:
    """tests/ops_serve_fake.py (serve's wiring over a fake backend) with a given state path."""

    def __init__(self, tmp_path: Path, state: Path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / f"server-{self.port}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.ops_serve_fake", "--port", str(self.port), "--policy",
             str(tmp_path / "policy.yaml"), "--state", str(state), "--drain", "2", "--step", "0.001"],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=self._log, stderr=subprocess.STDOUT,
        )

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.log()
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "gateway did not start:\n" + self.log()
            time.sleep(0.1)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self._log.close()
        return code

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()


def _serve_and_stop(tmp_path: Path, state: Path) -> tuple[int, str]:
    server = FakeServeProcess(tmp_path, state)
    try:
        server.wait_healthy()
        body = {"messages": [{"role": "user", "content": "code"}], "max_tokens": 4, "engine": "mtp"}
        assert httpx.post(server.base + CHAT, json=body, timeout=30).status_code == 200
        code = server.stop()
        return code, server.log()
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


@pytest.mark.parametrize("content", [b"{not json", b"", b"\xff\xfe\x00garbage", b'{"format": 99, "arms": {}}',
                                     b'{"arms": {"code/mtp": {"steps": "many"}}}'])
def test_corrupt_state_file_never_blocks_startup_and_is_replaced(tmp_path, content):
    state = tmp_path / "router_state.json"
    state.write_bytes(content)
    code, log = _serve_and_stop(tmp_path, state)
    assert code == 0, log
    assert "router state file" in log and "ignored" in log
    reloaded = Monitor(state)                       # the clean shutdown wrote a good file over it
    assert reloaded.load_error is None
    assert reloaded.snapshot()["arms"]["code/mtp/sampled"]["steps"] >= 1  # no temperature: sampled at the default


def test_unwritable_state_file_never_blocks_startup_or_shutdown(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the state directory should be")
    code, log = _serve_and_stop(tmp_path, blocker / "router_state.json")
    assert code == 0, log
    assert "cannot save router state" in log


POLICY_VARIANTS = [
    "exploration: {kind: none}\nstate: {path: null}\n",
    "exploration: {kind: epsilon, epsilon: 0.5}\nstate: {path: null}\n",
    "exploration: {kind: none}\nstate: {path: null}\nrules:\n  - when: {classes: [code]}\n    engine: ddtree\n",
    "exploration: {kind: thompson}\nstate: {path: null}\nqueue: {raw_above_depth: 0}\n",
    "exploration: {kind: nonsense}\n",                    # invalid: rejected, the old policy stays
    "rules: [\n",                                          # broken YAML
]


def test_policy_reloads_under_load_are_safe(tmp_path):
    backend = SpeculativeFake(reply=" ".join(f"w{i}" for i in range(40)), step_seconds=0.002)
    app, router = serve_like_app(backend, tmp_path / "policy.yaml")
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY_VARIANTS[0])
    router.start(watch_policy=True, watch_interval=0.02, install_sighup=False)
    outcomes: list[str] = []
    reload_statuses: list[int] = []
    stop = threading.Event()

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(timeout=30) as http:
            while not stop.is_set():
                body = {"messages": [{"role": "user", "content": rng.choice(["code", "prose", "structured"])}],
                        "max_tokens": rng.randint(1, 30), "stream": rng.random() < 0.5}
                response = http.post(server.base_url + CHAT, json=body)
                ok = response.status_code == 200 and '"error"' not in response.text
                if body["stream"]:
                    ok = ok and sse_payloads(response.text)[-1] == "[DONE]"
                outcomes.append("ok" if ok else f"{response.status_code}: {response.text[:200]}")

    def reloader() -> None:
        rng = random.Random(7)
        with httpx.Client(timeout=30) as http:
            while not stop.is_set():
                text = rng.choice(POLICY_VARIANTS)
                if rng.random() < 0.5:            # atomic replace, as editors and config management do
                    tmp = policy.with_suffix(".tmp")
                    tmp.write_text(text)
                    os.replace(tmp, policy)
                else:                             # in-place rewrite: the watcher may see a torn file
                    policy.write_text(text)
                reload_statuses.append(http.post(server.base_url + "/admin/reload").status_code)
                time.sleep(0.01)

    try:
        with live_server(app) as server:
            threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
            threads.append(threading.Thread(target=reloader))
            for thread in threads:
                thread.start()
            time.sleep(3.0)
            stop.set()
            for thread in threads:
                thread.join(30)
            assert httpx.get(server.base_url + "/health").status_code == 200
            stats = httpx.get(server.base_url + "/v1/router/stats").json()
    finally:
        router.close()
    failures = [o for o in outcomes if o != "ok"]
    assert not failures, failures[:5]
    assert len(outcomes) > 20
    assert set(reload_statuses) <= {200, 422} and 200 in reload_statuses and 422 in reload_statuses
    counters = router.store.counters()
    assert counters["reload_successes"] > 5 and counters["reload_failures"] > 0
    assert counters["version"] > 1 and "classes" in stats
