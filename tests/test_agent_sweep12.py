"""A twelfth agent sweep: requests as the openai and anthropic SDKs (and the agents and frameworks on them)
send them, against a served gateway. Each test is a gap the sweep found."""

from __future__ import annotations

import json

import httpx

from tests.agent_sweeps import openai_client as _openai
from tests.agent_sweeps import post as _post
from tests.agent_sweeps import srv  # noqa: F401 - srv is the shared fixture

PROSE = "The quick brown fox"


def _chunks(response: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


def test_echo_puts_the_prompt_before_each_choice(srv):
    """OpenAI's /v1/completions `echo: true` returns each prompt's text before its choices' text (clients that
    want the whole document, lm-eval style harnesses); here it was a 400 "echo is not supported". The prompt's
    text (token ids decoded) now leads each choice, in a stream as the choice's first chunk; echo with
    logprobs, which would need the prompt's own log-probabilities, is a 400 that says so."""
    srv.backend.reply = PROSE
    client = _openai(srv)
    reply = client.completions.create(model="default", prompt=["Once upon", "a time"], n=2, max_tokens=2, echo=True)
    assert [c.text for c in reply.choices] == ["Once uponThe quick"] * 2 + ["a timeThe quick"] * 2
    assert reply.usage.completion_tokens == 8   # the echo is no generated token
    ids = client.completions.create(model="default", prompt=[72, 105], max_tokens=1, echo=True)
    assert ids.choices[0].text == "HiThe"
    best = client.completions.create(model="default", prompt="x", n=1, best_of=2, max_tokens=1, echo=True)
    assert best.choices[0].text == "xThe" and best.choices[0].logprobs is None
    streamed = _post(srv, "/v1/completions", {"prompt": ["ab", "c"], "max_tokens": 2, "echo": True, "stream": True})
    texts: dict[int, list[str]] = {}
    for chunk in _chunks(streamed):
        for choice in chunk["choices"]:
            texts.setdefault(choice["index"], []).append(choice["text"])
    assert texts == {0: ["ab", "The", " quick"], 1: ["c", "The", " quick"]}
    plain = client.completions.create(model="default", prompt="hi", max_tokens=1, echo=False)
    assert plain.choices[0].text == "The"
    refused = _post(srv, "/v1/completions", {"prompt": "hi", "max_tokens": 1, "echo": True, "logprobs": 1})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "echo", refused.text
    assert "log-probabilities" in refused.json()["error"]["message"]
    outside = _post(srv, "/v1/completions", {"prompt": [10**6], "max_tokens": 1, "echo": True})
    assert outside.status_code == 400 and outside.json()["error"]["code"] == "invalid_token_id", outside.text
