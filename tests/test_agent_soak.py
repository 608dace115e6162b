"""bench/agent_soak.py against the embedded demo model: five clients at once speaking chat with tools,
Anthropic messages, the Responses API, Ollama's /api/chat and the odd requests (n, completions, a prompt past the window,
a hang-up, JSON beside tools) through the official SDKs; no 5xx, no dropped connection, no malformed
reply, and the server answers afterwards."""

from __future__ import annotations

import pytest

from bench.agent_soak import SHAPES, Busy, Soak, run_soak
from gateway.http.app import create_app
from tests.fakes import live_server
from tests.ops_helpers import REPO

DEMO = REPO / "models" / "switchyard-demo"


@pytest.fixture(scope="module")
def server():
    from engines.runtime import load_runtime

    runtime = load_runtime(str(DEMO / "target"), draft_dir=str(DEMO / "drafter"))
    with live_server(create_app(runtime)) as srv:
        yield srv


def test_agent_clients_at_once_get_well_formed_replies(server):
    summary = run_soak(server.base_url, clients=len(SHAPES), turns=2, seed=1)
    assert summary["failures"] == []
    assert all(summary["counts"].get(f"{shape}:ok", 0) >= 1 for shape in SHAPES), summary["counts"]
    assert summary["counts"]["after:ok"] == 1


def test_a_server_error_is_a_failure_and_a_client_error_or_a_full_queue_is_not():
    import httpx
    import openai

    soak = Soak("http://127.0.0.1:9", seed=0)
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")

    def server_error():
        raise openai.InternalServerError("boom", response=httpx.Response(500, request=request), body=None)

    def client_error():
        raise openai.BadRequestError("bad", response=httpx.Response(400, request=request), body=None)

    def busy():
        raise Busy("1")

    soak.turn("chat", 0, 0, server_error)
    soak.turn("chat", 0, 1, client_error)
    soak.turn("misc", 0, 2, busy)
    assert soak.counts == {"chat:failed": 1, "chat:4xx": 1, "misc:4xx": 1} and len(soak.failures) == 1
