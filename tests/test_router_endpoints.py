"""The adaptive router inside the app: route headers, GET /v1/router/stats, POST /admin/reload,
route metrics, and SIGHUP through AdaptiveRouter.start()."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest

from bench.router_sim import LabelFromUserText
from gateway.http.app import create_app
from gateway.routing.router import AdaptiveRouter
from tests.fakes import FakeBackend, live_server

POLICY = "exploration: {kind: none}\nstate: {path: null}\nrules:\n  - when: {classes: [structured]}\n    engine: raw\n"


@pytest.fixture()
def served(tmp_path):
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY)
    backend = FakeBackend(engine_names=("raw", "mtp"))
    router = AdaptiveRouter.from_policy_file(policy_file, backend.engine_names, LabelFromUserText())
    app = create_app(backend, router=router)
    with live_server(app) as server:
        yield server, router, policy_file, app


@pytest.fixture()
def shipped_client(tmp_path):
    """An openai client of an app that routes "auto": the shipped classifier labels every request."""
    import openai

    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("exploration: {kind: none}\nstate: {path: null}\n")
    backend = FakeBackend(engine_names=("raw", "mtp"))
    router = AdaptiveRouter.from_policy_file(policy_file, backend.engine_names, "auto")
    with live_server(create_app(backend, router=router)) as server:
        yield openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=30)


def _chat(server, user_text: str, **extra) -> httpx.Response:
    body = {"model": "default", "messages": [{"role": "user", "content": user_text}], "max_tokens": 3, **extra}
    return httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=30)


def test_decisions_show_in_headers_stats_and_metrics(served):
    server, router, _, app = served
    code = _chat(server, "code")
    assert code.status_code == 200
    assert code.headers["X-Switchyard-Class"] == "code"
    assert code.headers["X-Switchyard-Engine"] == "mtp"  # the default priors prefer mtp
    assert code.headers["X-Switchyard-Route-Reason"] == "monitor"
    structured = _chat(server, "structured")
    assert structured.headers["X-Switchyard-Class"] == "structured"
    assert (structured.headers["X-Switchyard-Engine"], structured.headers["X-Switchyard-Route-Reason"]) == ("raw", "rule")
    forced = _chat(server, "prose", engine="raw")
    assert forced.headers["X-Switchyard-Route-Reason"] == "forced"

    stats = httpx.get(server.base_url + "/v1/router/stats", timeout=10)
    assert stats.status_code == 200
    body = stats.json()
    # no temperature: the model's default (1.0 here) decodes, so the steps land in the sampled arm
    assert body["measured"]["arms"]["code/mtp/sampled"]["steps"] == 3
    assert "code/mtp" not in body["measured"]["arms"]
    assert {"class": "code", "engine": "mtp", "reason": "monitor", "count": 1} in body["decisions"]
    assert body["loaded_engines"] == ["mtp", "raw"]
    # the batch cost table the load-aware routing uses: the policy's prior until batches are timed
    assert body["measured"]["batches"] == {}
    assert body["batch_costs"][:3] == pytest.approx([1.0, 1.15, 1.3])

    metrics = httpx.get(server.base_url + "/metrics", timeout=10).text
    assert 'switchyard_route_decisions_total{class="code",engine="mtp",reason="monitor"} 1.0' in metrics
    assert 'switchyard_router_predicted_speedup{class="prose",engine="raw"} 1.0' in metrics


def test_admin_reload_applies_and_rejects(served):
    server, router, policy_file, _ = served
    policy_file.write_text(POLICY.replace("kind: none", "kind: epsilon"))
    ok = httpx.post(server.base_url + "/admin/reload", timeout=10)
    assert ok.status_code == 200 and ok.json() == {"ok": True, "version": 2, "trigger": "admin", "errors": []}
    assert router.store.policy.exploration.kind == "epsilon"

    policy_file.write_text("exploration: {kind: always}\n")
    bad = httpx.post(server.base_url + "/admin/reload", timeout=10)
    assert bad.status_code == 422
    assert bad.json()["ok"] is False and bad.json()["version"] == 2
    assert any("exploration.kind" in e for e in bad.json()["errors"])
    assert router.store.policy.exploration.kind == "epsilon"
    metrics = httpx.get(server.base_url + "/metrics", timeout=10).text
    assert 'switchyard_policy_reloads_total{result="failure"} 1.0' in metrics
    assert 'switchyard_policy_version 2.0' in metrics
    assert httpx.get(server.base_url + "/admin/reload", timeout=10).status_code == 405


def test_admin_reload_refuses_non_loopback_clients(served):
    _, router, _, app = served

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=("192.0.2.7", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return await client.post("/admin/reload")

    response = asyncio.run(call())
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_error"
    assert router.store.counters()["reload_successes"] == 0


def test_stats_without_the_adaptive_router_is_a_clean_404():
    with live_server(create_app(FakeBackend())) as server:
        response = httpx.get(server.base_url + "/v1/router/stats", timeout=10)
        assert response.status_code == 404 and "error" in response.json()
        assert httpx.post(server.base_url + "/admin/reload", timeout=10).status_code == 404


def test_router_start_reloads_on_sighup_and_close_restores_the_handler(tmp_path):
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("quarantine_seconds: 1\nstate: {path: null}\n")
    router = AdaptiveRouter.from_policy_file(policy_file, ("raw",), classifier=None)
    before = signal.getsignal(signal.SIGHUP)
    router.start(watch_interval=30.0)
    try:
        policy_file.write_text("quarantine_seconds: 2\nstate: {path: null}\n")
        os.kill(os.getpid(), signal.SIGHUP)
        deadline = time.monotonic() + 5
        while router.store.policy.quarantine_seconds != 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert router.store.policy.quarantine_seconds == 2
    finally:
        router.close()
    assert signal.getsignal(signal.SIGHUP) == before


def test_tools_offered_in_the_body_route_an_everyday_ask_as_a_call(shipped_client):
    """The shipped classifier behind the app, through the openai client: a chat request that offers tools
    (tool_choice auto) asks for a call, so it routes as structured; with tool_choice "none" the same ask
    is the model's to read, and an ask for code stays code."""
    tools = [{"type": "function", "function": {"name": "set_light", "description": "Set a light's brightness",
              "parameters": {"type": "object", "properties": {"room": {"type": "string"},
                                                              "level": {"type": "integer"}}}}}]

    def routed(text: str, **extra) -> str:
        raw = shipped_client.chat.completions.with_raw_response.create(
            model="default", messages=[{"role": "user", "content": text}], max_tokens=2, **extra)
        return raw.headers["x-switchyard-class"]

    ask = "Dim the living room lamps to 30 percent."
    assert routed(ask, tools=tools) == "structured"
    assert routed(ask, tools=tools, tool_choice="none") != "structured"
    assert routed("Write a bash one-liner that counts the lines of every .py file under src/.",
                  tools=tools) == "code"


def test_a_code_prefix_sent_for_completion_routes_as_code(shipped_client):
    """The shipped classifier behind the app, through the openai client: an editor's text before the
    cursor (a function header and its docstring) on /v1/completions, and the same in a chat message, is
    continued with code; an unfinished JSON value with JSON."""
    stub = 'def word_lengths(sentence):\n    """Map every word of the sentence to its length."""\n'
    completed = shipped_client.completions.with_raw_response.create(model="default", prompt=stub, max_tokens=2)
    assert (completed.headers["x-switchyard-class"], completed.headers["x-switchyard-route-reason"]) == \
        ("code", "monitor")
    chat = shipped_client.chat.completions.with_raw_response.create(
        model="default", messages=[{"role": "user", "content": stub}], max_tokens=2)
    assert chat.headers["x-switchyard-class"] == "code"
    data = shipped_client.completions.with_raw_response.create(
        model="default", prompt='{"title": "Dune", "tags": [', max_tokens=2)
    assert data.headers["x-switchyard-class"] == "structured"


def test_a_follow_up_routes_in_the_kind_of_the_reply_it_continues(shipped_client):
    """The shipped classifier behind the app, through the openai client: "Continue" after a code reply
    routes as code, after a JSON reply as structured, after prose as prose."""
    replies = {"code": "```python\ndef add(a, b):\n    return a + b\n```",
               "structured": '```json\n{"city": "Lisbon"}\n```',
               "prose": "Lisbon is the capital of Portugal, on the Tagus estuary."}
    for kind, reply in replies.items():
        raw = shipped_client.chat.completions.with_raw_response.create(
            model="default", max_tokens=2, messages=[{"role": "user", "content": "Start, please."},
                                                     {"role": "assistant", "content": reply},
                                                     {"role": "user", "content": "Continue"}])
        assert raw.headers["x-switchyard-class"] == kind


def test_custom_instructions_in_a_system_prompt_leave_the_class_to_the_ask(shipped_client):
    """The shipped classifier behind the app, through the openai client: a chat UI's custom
    instructions ("explain your reasoning", "short paragraphs") say how to reply, not what: the ask
    under them decides the class."""
    systems = ("You are a helpful assistant. Always explain your reasoning step by step.",
               "Answer in clear, well-structured paragraphs and keep a friendly tone.")
    asks = {"code": "Write a Python function to merge two dicts, the second one winning on shared keys.",
            "structured": "Convert this CSV to JSON:\nname,age\nAna,31\nBo,27",
            "prose": "Why do onions make people cry?"}
    for system in systems:
        for kind, ask in asks.items():
            raw = shipped_client.chat.completions.with_raw_response.create(
                model="default", max_tokens=2, messages=[{"role": "system", "content": system},
                                                         {"role": "user", "content": ask}])
            assert raw.headers["x-switchyard-class"] == kind, (system, ask)
