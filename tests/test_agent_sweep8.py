"""An eighth agent sweep: what coding agents and chat UIs send and read back (Codex's request metadata, reasoning
summaries, ...), reproduced with the openai / anthropic SDKs against a served gateway. Each test is a gap the
sweep found."""

from __future__ import annotations

from tests.agent_sweeps import WEATHER, srv  # noqa: F401 - srv is the shared fixture
from tests.agent_sweeps import openai_client as _openai
from tests.agent_sweeps import post as _post


def test_responses_take_codex_client_metadata(srv):
    """Codex sends its installation id in `client_metadata` on every /v1/responses request (openai/codex#16912):
    it was an "Unrecognized request argument" 400, so every Codex turn failed. It is accepted and changes
    nothing, streamed or not."""
    body = {"input": "hi", "store": False, "client_metadata": {"x-codex-installation-id": "5f0c8f9e"}}
    reply = _post(srv, "/v1/responses", body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["output"][-1]["content"][0]["text"] == "It is sunny."
    streamed = _post(srv, "/v1/responses", {**body, "stream": True})
    assert streamed.status_code == 200 and "response.completed" in streamed.text
