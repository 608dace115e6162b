"""POST /tokenize and /detokenize (vLLM's, and llama.cpp's body) on the embedded demo model, over HTTP as
SillyTavern and context-budgeting agents call them: the count is the prompt the server runs (usage's
prompt_tokens of the same chat or completion), ids decode back to the text, errors are OpenAI's."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.fakes import served_demo

CONVERSATION = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Write a Python function that reverses a list."}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


@pytest.fixture(scope="module")
def server():
    with served_demo() as (srv, runtime):
        yield srv, runtime, openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)


def test_chat_count_is_the_prompt_the_server_runs(server):
    srv, runtime, client = server
    for extra in ({}, {"tools": [WEATHER]}, {"chat_template_kwargs": {"enable_thinking": False}}):
        counted = httpx.post(srv.base_url + "/tokenize", json={"model": "default", "messages": CONVERSATION, **extra})
        assert counted.status_code == 200, counted.text
        body = counted.json()
        reply = client.chat.completions.create(model="default", messages=CONVERSATION, max_tokens=1,
                                               tools=extra.get("tools", openai.NOT_GIVEN),
                                               extra_body={k: v for k, v in extra.items() if k != "tools"})
        assert body["count"] == len(body["tokens"]) == reply.usage.prompt_tokens, extra
        assert body["max_model_len"] == runtime.context_length
    # vLLM's continue_final_message: the prompt ends inside the assistant's unfinished reply, as the chat runs it
    started = [*CONVERSATION, {"role": "assistant", "content": "def reverse("}]
    switches = {"continue_final_message": True, "add_generation_prompt": False}
    body = httpx.post(srv.base_url + "/tokenize", json={"messages": started, **switches}).json()
    text = httpx.post(srv.base_url + "/detokenize", json={"tokens": body["tokens"]}).json()["prompt"]
    assert text.endswith("def reverse(") and "Write a Python function" in text
    reply = client.chat.completions.create(model="default", messages=started, max_tokens=1, extra_body=switches)
    assert body["count"] == reply.usage.prompt_tokens


def test_text_count_round_trip_and_pieces(server):
    srv, _, client = server
    text = "def reverse(items):\n    return items[::-1]  # naïve"
    body = httpx.post(srv.base_url + "/tokenize", json={"prompt": text, "return_token_strs": True}).json()
    reply = client.completions.create(model="default", prompt=text, max_tokens=1)
    assert body["count"] == reply.usage.prompt_tokens and len(body["token_strs"]) == body["count"]
    back = httpx.post(srv.base_url + "/detokenize", json={"tokens": body["tokens"]}).json()
    assert back["prompt"] == back["content"] == text
    # llama.cpp's body and shape: the same ids, with each one's text where asked
    llama = httpx.post(srv.base_url + "/tokenize", json={"content": text, "with_pieces": True}).json()
    assert [p["id"] for p in llama["tokens"]] == body["tokens"]
    assert [p["piece"] for p in llama["tokens"]] == body["token_strs"]
    assert httpx.post(srv.base_url + "/tokenize", json={"content": text}).json()["tokens"] == body["tokens"]


def test_bad_bodies_are_openai_errors(server):
    srv, runtime, _ = server
    cases = [("/tokenize", {"prompt": "x", "model": "nope"}, 404, "model"),
             ("/tokenize", {"messages": []}, 400, "messages"),
             ("/tokenize", {"prompt": 3}, 400, "prompt"),
             ("/tokenize", {"prompt": "x", "frobnicate": True}, 400, "frobnicate"),
             ("/tokenize", {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "nope"}]}, 400, "tools"),
             ("/detokenize", {"tokens": [runtime.bundle.vocab_size]}, 400, "tokens"),
             ("/detokenize", {"tokens": "abc"}, 400, "tokens")]
    for path, body, status, param in cases:
        response = httpx.post(srv.base_url + path, json=body)
        assert response.status_code == status, (body, response.text)
        error = response.json()["error"]
        assert error["message"] and param in (error["param"] or "") + error["message"], (body, error)
