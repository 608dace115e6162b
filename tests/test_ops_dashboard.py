"""dashboards/switchyard.json: importable shape, datasource variable, every PromQL expression parses
(Prometheus's own parser, via promtool) and names only metrics a real /metrics scrape has."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes import live_server
from tests.ops_helpers import REPO, SpeculativeFake, drive_traffic, serve_like_app, tool
from tests.promql import metric_names, substitute

DASHBOARD = REPO / "dashboards" / "switchyard.json"
PROVISIONING = REPO / "dashboards" / "provisioning"


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _targets(dashboard: dict) -> list[dict]:
    return [t for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]]


def test_committed_json_is_the_builders_output():
    sys.path.insert(0, str(REPO / "dashboards"))
    try:
        import build_dashboard
    finally:
        sys.path.pop(0)
    assert DASHBOARD.read_text() == build_dashboard.render(), "run: python dashboards/build_dashboard.py"


def test_dashboard_shape_imports():
    d = _dashboard()
    assert d["title"] and d["uid"] and isinstance(d["schemaVersion"], int)
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    titles = [p["title"] for p in d["panels"]]
    for wanted in ("Generated tokens / s by engine", "Time to first token", "Time per output token by engine",
                   "End-to-end latency", "Acceptance rate by engine x class", "Mean accepted tokens per verify step",
                   "Route mix by engine", "Route decisions by reason", "Classifier latency", "Queue and running",
                   "Model memory", "Policy reloads by result"):
        assert wanted in titles
    for panel in d["panels"]:
        pos = panel["gridPos"]
        assert all(isinstance(pos[k], int) for k in "hwxy") and pos["x"] + pos["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["expr"].strip() and target["datasource"]["uid"] == "${datasource}"
    assert any("histogram_quantile" in t["expr"] for t in _targets(d))


def test_provisioning_files():
    datasource = yaml.safe_load((PROVISIONING / "datasources" / "switchyard.yaml").read_text())
    assert datasource["apiVersion"] == 1
    assert datasource["datasources"][0]["type"] == "prometheus"
    provider = yaml.safe_load((PROVISIONING / "dashboards" / "switchyard.yaml").read_text())
    assert provider["apiVersion"] == 1
    options = provider["providers"][0]
    assert options["type"] == "file" and options["options"]["path"].startswith("/")


def test_every_expression_parses_with_promtool(tmp_path):
    promtool = tool("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian: apt-get install prometheus)")
    rules = [{"record": f"dashboard:expr_{i}", "expr": substitute(t["expr"])} for i, t in enumerate(_targets(_dashboard()))]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_metric_name_extraction():
    expr = ('histogram_quantile(0.9, sum by (le, engine) (rate(a_bucket{instance=~"$instance", x="y(z)"}'
            '[$__rate_interval]))) / clamp_min(sum(b_total), 1e-9) > -1 and on(engine) c')
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}


@pytest.fixture(scope="module")
def exposition(tmp_path_factory) -> str:
    """/metrics text of the serve-like app after traffic that touches every series."""
    backend = SpeculativeFake(handoff_after=3)
    app, _ = serve_like_app(backend, tmp_path_factory.mktemp("dash") / "policy.yaml")
    with live_server(app) as server:
        drive_traffic(server.base_url, backend)
        return httpx.get(server.base_url + "/metrics", timeout=10).text


def test_every_dashboard_metric_exists_in_a_real_scrape(exposition):
    exposed = {s.name for family in text_string_to_metric_families(exposition) for s in family.samples}
    used = set().union(*(metric_names(t["expr"]) for t in _targets(_dashboard())))
    assert len(used) > 25
    assert all(name.startswith("switchyard_") for name in used), used
    missing = sorted(used - exposed)
    assert not missing, f"dashboard reads metrics /metrics does not have after traffic: {missing}"


def test_docs_table_lists_every_metric_with_its_type_and_labels(exposition):
    """The README's Metrics section documents exactly what /metrics exposes."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("\n## Metrics\n"):]
    section = section[: section.index("\n## ", 1)]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`switchyard_"):
            labels = set() if cells[2] == "—" else {x.strip() for x in cells[2].split(",")}
            rows[cells[0].strip("`")] = (cells[1], labels)
    exposed = {}
    for family in text_string_to_metric_families(exposition):
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        exposed[name] = (family.type, labels)
    assert sorted(set(exposed) - set(rows)) == [], "undocumented metrics"
    assert sorted(set(rows) - set(exposed)) == [], "documented metrics that /metrics does not have"
    for name, (kind, labels) in exposed.items():
        assert rows[name] == (kind, labels), name


def test_request_panels_count_every_api_that_generates():
    """The request-rate, error-ratio, class and status panels filter by `endpoint`: every generating API
    (OpenAI, Anthropic Messages, Responses, Ollama) must fall inside the filter, or its traffic and its
    5xx vanish from the overview."""
    import re

    from gateway.observability.metrics import GENERATION_ENDPOINTS

    filters = [m.group(1) for t in _targets(_dashboard()) if "switchyard_requests_total" in t["expr"]
               for m in re.finditer(r'endpoint=~"([^"]*)"', t["expr"])]
    assert len(filters) >= 4
    for pattern in filters:
        assert [e for e in GENERATION_ENDPOINTS if not re.fullmatch(pattern, e)] == [], pattern
        assert not re.fullmatch(pattern, "models") and not re.fullmatch(pattern, "metrics")
