"""What agent frameworks send and parse, reproduced with the plain SDKs and httpx: each test is a
defect an agent-library sweep found (litellm, LangChain, pydantic-ai, openai-agents, instructor, the
AI SDK's openai-compatible provider, Claude-Code-style Anthropic clients) against the running server.
"""

from __future__ import annotations

import re

import anthropic
import httpx
import openai
import pytest

from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server

ASK = [{"role": "user", "content": "hi"}]
# the text clients match a context overflow on: litellm's ContextWindowExceededError (OpenAI's words),
# and Anthropic's two messages (compact on "prompt is too long"; retry with a max_tokens that fits)
OPENAI_OVERFLOW = "This model's maximum context length is"
ANTHROPIC_MAX_TOKENS = re.compile(r"input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+)")


@pytest.fixture(scope="module")
def tiny_runtime_server(tiny_target):
    from engines.runtime import load_runtime

    runtime = load_runtime(str(tiny_target))
    with live_server(create_app(runtime)) as srv:
        yield srv, runtime


def test_context_overflow_is_worded_as_each_api_words_it(tiny_runtime_server):
    """A prompt plus max_tokens over the context was "prompt (N tokens) plus max_tokens (M) exceeds the
    model's context length (C)": right code, but no client recognised it (litellm raised a plain
    BadRequestError, not ContextWindowExceededError; Anthropic clients neither compacted nor retried)."""
    srv, runtime = tiny_runtime_server
    context = runtime.context_length
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="default", messages=ASK, max_tokens=context)
    assert err.value.body["code"] == "context_length_exceeded"
    assert err.value.body["message"].startswith(OPENAI_OVERFLOW)
    assert f"{context} tokens" in err.value.body["message"] and f"{context} in the completion" in err.value.body["message"]

    claude = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model="default", messages=ASK, max_tokens=context)
    match = ANTHROPIC_MAX_TOKENS.search(err.value.body["error"]["message"])
    assert match is not None, err.value.body
    prompt, max_tokens, limit = map(int, match.groups())
    assert max_tokens == context and limit == context and 0 < prompt < context

    too_long = [{"role": "user", "content": "word " * (context + 100)}]
    for stream in (False, True):
        response = httpx.post(srv.base_url + "/v1/messages", json={"model": "default", "max_tokens": 8,
                                                                   "messages": too_long, "stream": stream})
        assert response.status_code == 400
        assert response.json()["error"]["message"].startswith("prompt is too long: "), response.text


def test_a_prompt_that_leaves_no_room_is_worded_as_openai_words_it():
    """Without max_tokens the prompt alone is too long: OpenAI's "your messages resulted in N tokens"."""
    backend = FakeBackend(context_length=50)
    with live_server(create_app(backend)) as srv:
        response = httpx.post(srv.base_url + "/v1/chat/completions",
                              # the fake template renders this to exactly 50 characters: no room left
                              json={"messages": [{"role": "user", "content": "y" * 29}]})
    error = response.json()["error"]
    assert response.status_code == 400 and error["code"] == "context_length_exceeded"
    assert error["message"].startswith(OPENAI_OVERFLOW) and "max_tokens" not in error["message"]


EPHEMERAL = {"type": "ephemeral"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _ai_sdk_history(hint: dict) -> list[dict]:
    """A conversation as the AI SDK's openai-compatible provider writes it, with `hint` spread where
    its providerOptions.openaiCompatible metadata goes: messages, text parts, tool calls."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    return [{"role": "system", "content": "You are a coding agent.", **hint},
            {"role": "user", "content": [{"type": "text", "text": "Weather?", **hint},
                                         {"type": "text", "text": "In Paris.", **hint}]},
            {"role": "assistant", "content": "", "tool_calls": [{**call, **hint}], **hint},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny", **hint},
            {"role": "user", "content": "Thanks.", **hint}]


def test_cache_control_hints_are_accepted_and_change_nothing(qwen_chat_tokenizer):
    """opencode and other AI-SDK agents put `cache_control: {"type": "ephemeral"}` on messages, text
    parts and tool calls (prompt-caching breakpoints for Claude-named models): every such request was
    a 400 "Unrecognized request argument supplied: messages.0.cache_control"."""
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply="done\n</think>\n\nok")
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        for hint in ({}, {"cache_control": EPHEMERAL}):
            reply = client.chat.completions.create(model="default", messages=_ai_sdk_history(hint), tools=[WEATHER],
                                                   max_tokens=4)
            assert reply.choices[0].message.content == "ok"
    plain, hinted = backend.encoded[-2:]
    assert hinted == plain and "<tool_response>\nsunny\n</tool_response>" in hinted
