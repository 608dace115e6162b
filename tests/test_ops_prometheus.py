"""deploy/prometheus: config and rules pass promtool (syntax and alert unit tests), and a real
Prometheus server scrapes a test gateway: Switchyard series arrive through its HTTP API, the
recording rules evaluate, and every dashboard expression runs."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.fakes import live_server
from tests.ops_helpers import REPO, SpeculativeFake, drive_traffic, free_port, serve_like_app, tool
from tests.promql import substitute

PROM_DIR = REPO / "deploy" / "prometheus"
WAIT_SECONDS = 60


def _promtool() -> str:
    promtool = tool("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian: apt-get install prometheus)")
    return promtool


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60, cwd=PROM_DIR)


def test_promtool_check_config_and_rules():
    promtool = _promtool()
    config = _run(promtool, "check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr
    rules = _run(promtool, "check", "rules", "switchyard.rules.yml")
    assert rules.returncode == 0, rules.stdout + rules.stderr
    groups = yaml.safe_load((PROM_DIR / "switchyard.rules.yml").read_text())["groups"]
    alerts = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    assert {"SwitchyardDown", "SwitchyardHighErrorRate", "SwitchyardAcceptanceCollapse",
            "SwitchyardQueueSaturated"} <= alerts


def test_promtool_alert_unit_tests():
    result = _run(_promtool(), "test", "rules", "switchyard.rules.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def _query(base: str, expr: str) -> dict:
    response = httpx.get(base + "/api/v1/query", params={"query": expr}, timeout=10)
    body = response.json()
    assert body.get("status") == "success", f"{expr}: {body}"
    return body["data"]


def _wait_for(base: str, expr: str, deadline: float, proc: subprocess.Popen) -> list:
    while time.monotonic() < deadline:
        assert proc.poll() is None, "prometheus exited early"
        try:   # Prometheus answers 503 "Service Unavailable" (not JSON) until its storage is ready
            ready = httpx.get(base + "/-/ready", timeout=10).status_code == 200
            result = _query(base, expr)["result"] if ready else []
        except httpx.TransportError:
            result = []
        if result:
            return result
        time.sleep(0.25)
    raise AssertionError(f"no result for {expr!r} within {WAIT_SECONDS} s")


def test_real_prometheus_scrapes_the_gateway(tmp_path: Path):
    binary = tool("prometheus")
    if binary is None:
        pytest.skip("prometheus not installed (Debian: apt-get install prometheus)")
    backend = SpeculativeFake(handoff_after=3)
    app, _ = serve_like_app(backend, tmp_path / "policy.yaml")
    with live_server(app) as server:
        drive_traffic(server.base_url, backend)
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(PROM_DIR / "switchyard.rules.yml")],
            "scrape_configs": [{"job_name": "switchyard",
                                "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}]}],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = open(tmp_path / "prometheus.log", "w")
        proc = subprocess.Popen(
            [binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + WAIT_SECONDS
            info = _wait_for(base, 'switchyard_build_info{job="switchyard"}', deadline, proc)
            assert info[0]["metric"]["instance"] == f"127.0.0.1:{server.port}"
            assert _query(base, 'up{job="switchyard"}')["result"][0]["value"][1] == "1"
            # the counts Prometheus stored are the traffic sent: 7 routed generations, 1 rejected request
            decisions = _query(base, "sum(switchyard_route_decisions_total)")["result"]
            assert float(decisions[0]["value"][1]) == 7
            rejected = _query(base, 'sum(switchyard_requests_total{status="400"})')["result"]
            assert float(rejected[0]["value"][1]) == 1
            # recording rules evaluate once two scrapes exist
            _wait_for(base, "switchyard:spec_drafts:rate15m", deadline, proc)
            dashboard = json.loads((REPO / "dashboards" / "switchyard.json").read_text())
            for panel in dashboard["panels"]:
                for target in panel.get("targets", []):
                    _query(base, substitute(target["expr"]))  # every dashboard query runs on a real server
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
