"""A fourth agent sweep: shapes Codex CLI, Claude Code and the OpenAI / Anthropic SDKs send that were refused
(or accepted when they should not be). Each test is a gap the sweep found, reproduced with the SDKs or httpx."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server

WEATHER = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CLOCK = {"type": "function", "name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+Hello, world!\n*** End Patch"
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch.",
               "format": {"type": "text"}}
PATCH_CALL = (f"Editing.\n</think>\n\n<tool_call>\n<function=apply_patch>\n<parameter=input>\n{PATCH}\n</parameter>\n"
              "</function>\n</tool_call>")


@pytest.fixture
def srv(qwen_chat_tokenizer):
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply="Fine.\n</think>\n\nIt is sunny.")
    with live_server(create_app(backend)) as server:
        server.backend = backend
        yield server


def _openai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + path, json={"model": "default", **body})


def test_responses_take_a_refusal_part_back_as_text(srv):
    """An assistant message sent back with the `refusal` content part the API returned was a 400 on
    /v1/responses (chat completions reads it as the turn's text): now it is that text too."""
    reply = _openai(srv).responses.create(model="default", input=[
        {"role": "user", "content": "say something rude"},
        {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help with that."}]},
        {"role": "user", "content": "then say hi"}])
    assert reply.output_text == "It is sunny."
    assert "I can't help with that." in srv.backend.encoded[-1]


def test_allowed_tools_offers_only_the_allowed_subset(srv):
    """tool_choice {"type": "allowed_tools", "mode", "tools"} (Responses) and {"type": "allowed_tools",
    "allowed_tools": {...}} (chat) were 400s: the model is now offered only the allowed tools, and mode
    "required" forces a call of one of them."""
    client = _openai(srv)
    for mode, forced in (("auto", "auto"), ("required", "required")):
        client.responses.create(model="default", input="Weather in Paris?", tools=[WEATHER, CLOCK], tool_choice={
            "type": "allowed_tools", "mode": mode, "tools": [{"type": "function", "name": "get_weather"}]})
        chat = srv.backend.chats[-1]
        assert [t["function"]["name"] for t in chat["tools"]] == ["get_weather"] and chat["tool_choice"] == forced
        client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in (WEATHER, CLOCK)],
            tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": [
                {"type": "function", "function": {"name": "get_time"}}]}})
        chat = srv.backend.chats[-1]
        assert [t["function"]["name"] for t in chat["tools"]] == ["get_time"] and chat["tool_choice"] == forced
    unknown = _post(srv, "/v1/responses", {"input": "hi", "tools": [WEATHER], "tool_choice": {
        "type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "nope"}]}})
    assert unknown.status_code == 400, unknown.text
    assert unknown.json()["error"]["param"] == "tool_choice" and "'nope'" in unknown.json()["error"]["message"]
