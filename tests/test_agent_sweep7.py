"""A seventh agent sweep: what chat UIs, coding agents and SDK-built clients send and read back (token
bytes of log-probabilities, histories as the vendors' APIs now return them, ...), reproduced with the
openai / anthropic SDKs against a served gateway. Each test is a gap the sweep found."""

from __future__ import annotations

import openai
import pytest

from gateway.http.app import create_app
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
