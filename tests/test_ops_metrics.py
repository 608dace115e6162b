"""The full metric set counts exactly the traffic sent: speculation per engine x class and draft
position, step timings, queue/prefill/TPOT, routing, classifier latency, memory, policy info."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes import live_server
from tests.ops_helpers import SpeculativeFake, scrape, serve_like_app, total, value


def _chat(url: str, user: str, max_tokens: int, **extra) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": user}], "max_tokens": max_tokens, **extra}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=30)


@pytest.fixture()
def traffic(tmp_path):
    """Known traffic against the serve-like app; returns the scrape after it."""
    app, _ = serve_like_app(SpeculativeFake(), tmp_path / "policy.yaml")
    with live_server(app) as server:
        url = server.base_url
        assert _chat(url, "code", 4, engine="mtp").status_code == 200                  # mtp accepts 1,0,1,0
        with httpx.stream("POST", url + "/v1/completions", timeout=30,
                          json={"prompt": "prose", "max_tokens": 3, "stream": True, "engine": "ddtree"}) as r:
            assert r.status_code == 200
            assert r.read().decode().rstrip().endswith("data: [DONE]")                  # ddtree accepts 0,1,2
        assert _chat(url, "structured", 2).status_code == 200                           # routed by the monitor
        assert _chat(url, "code", 2, temperature=-1).status_code == 400                 # rejected before routing
        yield scrape(url)


def test_requests_tokens_and_finish_reasons(traffic):
    s = traffic
    assert value(s, "switchyard_requests_total", endpoint="chat_completions", engine="mtp", status="200",
                 **{"class": "code"}) == 1
    assert value(s, "switchyard_requests_total", endpoint="completions", engine="ddtree", status="200",
                 **{"class": "prose"}) == 1
    assert value(s, "switchyard_requests_total", endpoint="chat_completions", engine="none", status="400",
                 **{"class": "none"}) == 1
    assert value(s, "switchyard_generation_tokens_total", engine="mtp", **{"class": "code"}) == 4
    assert value(s, "switchyard_generation_tokens_total", engine="ddtree", **{"class": "prose"}) == 3
    assert total(s, "switchyard_generation_tokens_total", **{"class": "structured"}) == 2
    assert value(s, "switchyard_finish_reasons_total", reason="length") == 3


def test_speculation_per_engine_class_and_position(traffic):
    s = traffic
    mtp_code = {"engine": "mtp", "class": "code"}
    assert value(s, "switchyard_spec_drafts_total", **mtp_code) == 4
    assert value(s, "switchyard_spec_draft_tokens_total", **mtp_code) == 4
    assert value(s, "switchyard_spec_accepted_tokens_total", **mtp_code) == 2
    assert value(s, "switchyard_spec_accepted_tokens_per_step_count", **mtp_code) == 4
    assert value(s, "switchyard_spec_accepted_tokens_per_step_sum", **mtp_code) == 2
    assert value(s, "switchyard_spec_accepted_tokens_per_step_bucket", le="0.0", **mtp_code) == 2
    assert value(s, "switchyard_spec_accepted_tokens_per_step_bucket", le="1.0", **mtp_code) == 4

    dd_prose = {"engine": "ddtree", "class": "prose"}
    assert value(s, "switchyard_spec_drafts_total", **dd_prose) == 3
    assert value(s, "switchyard_spec_draft_tokens_total", **dd_prose) == 12
    assert value(s, "switchyard_spec_accepted_tokens_total", **dd_prose) == 0 + 1 + 2
    for position, drafted, accepted in (("1", 3, 2), ("2", 3, 1), ("3", 3, 0)):
        assert value(s, "switchyard_spec_position_drafted_total", engine="ddtree", position=position) == drafted
        assert value(s, "switchyard_spec_position_accepted_total", engine="ddtree", position=position) == accepted
    # mtp drafts one position (the routed "structured" request may have used mtp too: no class label here)
    assert value(s, "switchyard_spec_position_drafted_total", engine="mtp", position="1") == total(
        s, "switchyard_spec_drafts_total", engine="mtp") >= 4
    assert value(s, "switchyard_spec_position_accepted_total", engine="mtp", position="1") == total(
        s, "switchyard_spec_accepted_tokens_total", engine="mtp") >= 2
    assert total(s, "switchyard_spec_drafts_total", engine="raw") == 0


def test_steps_and_latency_histograms(traffic):
    s = traffic
    assert value(s, "switchyard_engine_steps_total", engine="mtp", **{"class": "code"}) == 4
    assert value(s, "switchyard_engine_tokens_total", engine="ddtree", **{"class": "prose"}) == 3
    # the first step of each request is its prefill; the others are decode steps
    # (no class label on these: the monitor-routed "structured" request adds to whichever engine it got)
    assert total(s, "switchyard_prefill_seconds_count") == 3
    assert value(s, "switchyard_prefill_seconds_count", engine="ddtree") >= 1
    assert total(s, "switchyard_engine_step_seconds_count") == (4 - 1) + (3 - 1) + (2 - 1)
    assert value(s, "switchyard_engine_step_seconds_count", engine="ddtree") >= 2
    assert total(s, "switchyard_queue_time_seconds_count") == 3
    assert value(s, "switchyard_time_per_output_token_seconds_count", engine="ddtree") >= 1
    assert total(s, "switchyard_time_per_output_token_seconds_count") == 3
    assert total(s, "switchyard_time_to_first_token_seconds_count") == 3
    assert total(s, "switchyard_classifier_latency_seconds_count") == 3
    assert total(s, "switchyard_classifier_latency_seconds_sum") > 0


def test_routing_memory_and_info(traffic):
    s = traffic
    assert value(s, "switchyard_route_decisions_total", engine="mtp", reason="forced", **{"class": "code"}) == 1
    assert value(s, "switchyard_route_decisions_total", engine="ddtree", reason="forced", **{"class": "prose"}) == 1
    assert total(s, "switchyard_route_decisions_total", **{"class": "structured"}) == 1
    assert total(s, "switchyard_route_decisions_total") == 3
    assert value(s, "switchyard_model_memory_bytes", kind="active") == 2048
    assert value(s, "switchyard_model_memory_bytes", kind="peak") == 4096
    assert value(s, "switchyard_engine_loaded", engine="ddtree") == 1
    assert value(s, "switchyard_policy_info", source="file", exploration="none", default_class="prose") == 1
    assert value(s, "switchyard_policy_engine_enabled", engine="mtp") == 1
    assert value(s, "switchyard_policy_last_reload_ok") == 1
    assert total(s, "switchyard_build_info") == 1
    assert value(s, "switchyard_requests_running") == 0
    assert value(s, "switchyard_draining") == 0
    assert total(s, "switchyard_start_time_seconds") > 1.7e9


def test_handoff_to_raw_is_counted_once(tmp_path):
    app, _ = serve_like_app(SpeculativeFake(handoff_after=2), tmp_path / "policy.yaml")
    with live_server(app) as server:
        assert _chat(server.base_url, "code", 5, engine="ddtree").status_code == 200
        s = scrape(server.base_url)
    assert value(s, "switchyard_engine_handoffs_total", engine="ddtree") == 1
    assert value(s, "switchyard_engine_steps_total", engine="ddtree", **{"class": "code"}) == 2
    assert value(s, "switchyard_engine_steps_total", engine="raw", **{"class": "code"}) == 3
    assert value(s, "switchyard_spec_drafts_total", engine="ddtree", **{"class": "code"}) == 2


def test_rejected_policy_reload_shows_in_metrics(tmp_path):
    policy = tmp_path / "policy.yaml"
    app, _ = serve_like_app(SpeculativeFake(), policy)
    with live_server(app) as server:
        good = policy.read_text()
        policy.write_text("exploration: {kind: sometimes}\n")
        assert httpx.post(server.base_url + "/admin/reload", timeout=10).status_code == 422
        assert value(scrape(server.base_url), "switchyard_policy_last_reload_ok") == 0
        policy.write_text(good.replace("kind: none", "kind: epsilon"))
        assert httpx.post(server.base_url + "/admin/reload", timeout=10).status_code == 200
        s = scrape(server.base_url)
    assert value(s, "switchyard_policy_last_reload_ok") == 1
    assert value(s, "switchyard_policy_info", source="file", exploration="epsilon", default_class="prose") == 1
    assert value(s, "switchyard_policy_reloads_total", result="failure") == 1


def test_real_runtime_reports_speculation_and_memory(tiny_target, tiny_drafter):
    """The real engines over a tiny checkpoint: their StepResults reach the speculation metrics and
    Runtime.memory_bytes() the memory gauges."""
    from engines.runtime import load_runtime
    from gateway.http.app import create_app

    runtime = load_runtime(tiny_target, draft_dir=tiny_drafter)
    assert {"mtp", "ddtree"} <= set(runtime.engine_names)
    with live_server(create_app(runtime)) as server:
        for engine in ("raw", "mtp", "ddtree"):
            response = httpx.post(server.base_url + "/v1/completions", timeout=120, json={
                "prompt": "def add(a, b):", "max_tokens": 8, "temperature": 0, "engine": engine})
            assert response.status_code == 200, response.text
        s = scrape(server.base_url)
    for engine in ("mtp", "ddtree"):
        drafts = total(s, "switchyard_spec_drafts_total", engine=engine)
        drafted = total(s, "switchyard_spec_draft_tokens_total", engine=engine)
        accepted = total(s, "switchyard_spec_accepted_tokens_total", engine=engine)
        assert drafts >= 1 and drafted >= drafts and 0 <= accepted <= drafted, (engine, drafts, drafted, accepted)
        assert total(s, "switchyard_spec_accepted_tokens_per_step_count", engine=engine) == drafts
        assert value(s, "switchyard_spec_position_drafted_total", engine=engine, position="1") == drafts
        assert value(s, "switchyard_prefill_seconds_count", engine=engine) == 1
    assert total(s, "switchyard_spec_drafts_total", engine="raw") == 0
    assert total(s, "switchyard_engine_steps_total", engine="raw") >= 1
    assert value(s, "switchyard_model_memory_bytes", kind="parameters") > 0
    assert value(s, "switchyard_model_memory_bytes", kind="mtp_head") > 0
    assert value(s, "switchyard_model_memory_bytes", kind="drafter") > 0
    assert value(s, "switchyard_model_memory_bytes", kind="peak") >= value(s, "switchyard_model_memory_bytes", kind="active") > 0
    assert value(s, "switchyard_engine_loaded", engine="ddtree") == 1
