"""A seventh agent sweep: what chat UIs, coding agents and SDK-built clients send and read back (token
bytes of log-probabilities, histories as the vendors' APIs now return them, ...), reproduced with the
openai / anthropic SDKs against a served gateway. Each test is a gap the sweep found."""

from __future__ import annotations

import openai
import pytest

from gateway.http.app import create_app
from tests.agent_sweeps import WEATHER, srv  # noqa: F401 - srv is the shared fixture
from tests.agent_sweeps import openai_client as _openai
from tests.fakes import live_server

EMOJI = "東京 🌧"
ONLY_EMOJI = {"type": "object", "properties": {"w": {"const": EMOJI}}, "required": ["w"],
              "additionalProperties": False}


@pytest.fixture(scope="module")
def runtime_server(tiny_qwen_chat_target):
    """A real runtime (engines, sampler, log-probabilities) on the tiny Qwen-tokenizer checkpoint."""
    from engines.runtime import load_runtime

    with live_server(create_app(load_runtime(str(tiny_qwen_chat_target)))) as server:
        yield server


def _joined(entries) -> str:
    return b"".join(bytes(entry.bytes) for entry in entries).decode("utf-8")


def test_logprob_bytes_rebuild_characters_split_across_tokens(runtime_server):
    """A token holding part of a multi-byte character (every CJK character and emoji of a byte-level
    vocabulary the merges did not cover) had `bytes` [239, 191, 189], the UTF-8 of the U+FFFD its text decodes
    to: a client joining `bytes` as OpenAI documents it (token highlighters, confidence of an answer) rebuilt
    "���" instead of the text. Each entry now carries the token's own bytes, the chosen tokens' and the
    alternatives', on chat (whole and streamed) and on /v1/responses."""
    client = openai.OpenAI(base_url=runtime_server.base_url + "/v1", api_key="unused", max_retries=0)
    ask = dict(model="default", messages=[{"role": "user", "content": "Weather?"}], logprobs=True, top_logprobs=2,
               max_tokens=40, response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": ONLY_EMOJI}})
    reply = client.chat.completions.create(**ask)
    content, entries = reply.choices[0].message.content, reply.choices[0].logprobs.content
    assert content == '{"w":"%s"}' % EMOJI and any(e.token == "\ufffd" for e in entries), entries
    assert _joined(entries) == content, [e.bytes for e in entries]
    # the constraint leaves each position one token: the top alternative is the chosen token, bytes and all
    assert all(e.top_logprobs[0].bytes == e.bytes for e in entries), entries

    chunks = list(client.chat.completions.create(**ask, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content or []]
    assert _joined(streamed) == "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == content

    response = client.responses.create(model="default", input="Weather?", max_output_tokens=40,
                                       include=["message.output_text.logprobs"],
                                       text={"format": {"type": "json_schema", "name": "w", "schema": ONLY_EMOJI}})
    text = response.output[-1].content[0]
    assert text.text == content and _joined(text.logprobs) == content, text.logprobs


def test_histories_as_the_vendors_apis_return_them_are_taken_back(srv):
    """Anthropic's API returns every tool_use block with `caller: {"type": "direct"}` (the anthropic SDKs'
    ToolUseBlock), and clients send `response.content` back as it came: a conversation begun on Anthropic's API
    and continued here (a Claude Code session switched to a local model, an AI SDK app changing provider)
    was "Unrecognized request argument supplied: messages.1.content.1.tool_use.caller". OpenAI's Responses API
    labels assistant messages with `phase` ("commentary" / "final_answer") and asks clients to resend it (Codex
    keeps it on the items it replays): "Unrecognized request argument supplied: input.1.phase". Both are
    taken back; a tool_use made from code execution (a server tool) is still refused."""
    import anthropic

    client = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
    tool = {"name": "get_weather", "input_schema": WEATHER["parameters"]}
    call = {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"},
            "caller": {"type": "direct"}}
    history = [{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": [{"type": "text", "text": "Checking.", "citations": None}, call]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "sunny"}]}]
    reply = client.messages.create(model="default", max_tokens=64, tools=[tool], messages=history)
    assert reply.content[-1].text == "It is sunny."
    assert "<function=get_weather>\n<parameter=city>\nParis" in srv.backend.encoded[-1]
    history[1]["content"][1] = {**call, "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"}}
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="default", max_tokens=64, tools=[tool], messages=history)

    response = _openai(srv).responses.create(model="default", input=[
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "phase": "final_answer",
         "content": [{"type": "output_text", "text": "Hello! What can I do?", "annotations": []}]},
        {"role": "user", "content": "the weather"}])
    assert response.output_text == "It is sunny." and "Hello! What can I do?" in srv.backend.encoded[-1]


def test_text_parts_and_formats_of_another_shape_say_which_shape_is_taken(srv):
    """A client speaking both OpenAI APIs sent the Responses API's {"type": "input_text"} part to chat (and an
    Anthropic client got one into /v1/messages): the 400 said "not supported (text-only model)", as if the
    model read no text. A response_format of an unknown type (Ollama's "json") said "Input should be 'text'".
    Each now names what is wrong and the shape the API takes; images stay refused as before."""
    import httpx

    cases = [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]},
         "messages.0.content", "{\"type\": \"text\", \"text\": ...}"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
            "url": "data:image/png;base64,AAAA"}}]}]}, "messages.0.content", "(text-only model)"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json"}},
         "response_format.type", "'json' is not supported; supported: text, json_object, json_schema"),
    ]
    for path, body, param, words in cases:
        error = httpx.post(srv.base_url + path, json={"model": "default", **body}).json()["error"]
        assert error["param"] == param and words in error["message"], (body, error)

    anthropic_error = httpx.post(srv.base_url + "/v1/messages", json={"model": "default", "max_tokens": 8, "messages": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}).json()["error"]
    assert "{\"type\": \"text\", \"text\": ...}" in anthropic_error["message"], anthropic_error


def test_top_logprobs_with_logprobs_declined_is_a_400_naming_it(srv):
    """`logprobs: false` with `top_logprobs: 3` came back with log-probabilities; OpenAI answers a 400 (its
    reference: top_logprobs needs logprobs true). Asking for alternatives without saying logprobs at all
    still implies them, and top_logprobs 0 beside false is no ask."""
    client = _openai(srv)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       logprobs=False, top_logprobs=3)
    assert refused.value.body["param"] == "top_logprobs" and "logprobs: true" in refused.value.body["message"]
    client.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                   top_logprobs=2)
    asked = srv.backend.calls[-1]["params"]
    assert (asked.logprobs, asked.top_logprobs) == (True, 2)
    client.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                   logprobs=False, top_logprobs=0)
    asked = srv.backend.calls[-1]["params"]
    assert (asked.logprobs, asked.top_logprobs) == (False, 0)
