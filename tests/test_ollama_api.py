"""Ollama's native API through the official `ollama` Python client (as chat UIs and agents that speak only
Ollama talk to a server), end to end on the embedded demo model: /api/chat and /api/generate streamed
(NDJSON, the default) and whole, `options` mapped onto the one sampler, `format` as constrained JSON,
/api/tags, /api/show, /api/ps and /api/version; errors as Ollama's {"error": ...}."""

from __future__ import annotations

import json

import httpx
import ollama
import openai
import pytest

from gateway.http.app import create_app
from tests.fakes import live_server, served_demo

SHORT = [{"role": "user", "content": "Say yes."}]


@pytest.fixture(scope="module")
def server():
    with served_demo() as (srv, runtime):
        yield srv, runtime, ollama.Client(host=srv.base_url), \
            openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)


def test_chat_whole_and_streamed_equal_the_openai_reply(server):
    srv, runtime, client, oai = server
    expected = oai.chat.completions.create(model="default", messages=SHORT, temperature=0, max_tokens=60)
    reply = client.chat(model=runtime.model_id, messages=SHORT, stream=False, options={"temperature": 0,
                                                                                      "num_predict": 60})
    assert reply.message.role == "assistant" and reply.done and reply.done_reason == "stop"
    assert reply.message.content == expected.choices[0].message.content
    assert reply.eval_count == expected.usage.completion_tokens
    assert reply.prompt_eval_count == expected.usage.prompt_tokens
    assert reply.total_duration > 0
    parts = list(client.chat(model=runtime.model_id + ":latest", messages=SHORT, stream=True,
                             options={"temperature": 0, "num_predict": 60}))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done and parts[-1].done_reason == "stop"
    assert "".join(p.message.content for p in parts) == reply.message.content
    assert parts[-1].eval_count == reply.eval_count


def test_options_reach_the_sampler(server):
    srv, runtime, client, oai = server
    cut = client.chat(model=runtime.model_id, messages=SHORT, options={"temperature": 0, "num_predict": 5},
                      stream=False)
    assert cut.done_reason == "length" and cut.eval_count == 5
    expected = oai.chat.completions.create(model="default", messages=SHORT, temperature=0.9, top_p=0.8, seed=7,
                                           max_tokens=30, stop=["git"],
                                           extra_body={"top_k": 20, "repetition_penalty": 1.2, "engine": "raw"})
    raw_engine = ollama.Client(host=srv.base_url, headers={"X-Switchyard-Engine": "raw"})
    reply = raw_engine.chat(model=runtime.model_id, messages=SHORT, stream=False, keep_alive="5m", options={
        "temperature": 0.9, "top_p": 0.8, "top_k": 20, "seed": 7, "num_predict": 30, "stop": ["git"],
        "repeat_penalty": 1.2, "repeat_last_n": -1, "num_ctx": 4096, "num_thread": 2})
    assert reply.message.content == expected.choices[0].message.content
    # repeat_last_n: the penalty reads the last n tokens only (llama.cpp's repeat_last_n on /v1 too)
    windowed = raw_engine.chat(model=runtime.model_id, messages=SHORT, stream=False, options={
        "temperature": 0, "num_predict": 40, "repeat_penalty": 1.5, "repeat_last_n": 8})
    whole = raw_engine.chat(model=runtime.model_id, messages=SHORT, stream=False, options={
        "temperature": 0, "num_predict": 40, "repeat_penalty": 1.5, "repeat_last_n": -1})
    assert windowed.message.content != whole.message.content
    same = oai.chat.completions.create(model="default", messages=SHORT, temperature=0, max_tokens=40, extra_body={
        "repetition_penalty": 1.5, "repeat_last_n": 8, "engine": "raw"})
    assert windowed.message.content == same.choices[0].message.content
    # the window left out is Ollama's default, 64 tokens (not the whole context)
    default = raw_engine.chat(model=runtime.model_id, messages=SHORT, stream=False, options={
        "temperature": 0, "num_predict": 40, "repeat_penalty": 1.5})
    sixty_four = oai.chat.completions.create(model="default", messages=SHORT, temperature=0, max_tokens=40, extra_body={
        "repetition_penalty": 1.5, "repeat_last_n": 64, "engine": "raw"})
    assert default.message.content == sixty_four.choices[0].message.content
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model=runtime.model_id, messages=SHORT, options={"mirostat": 2}, stream=False)
    assert caught.value.status_code == 400 and "mirostat" in caught.value.error
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model="llama3", messages=SHORT, stream=False)
    assert caught.value.status_code == 404


def test_generate_whole_streamed_raw_and_load(server):
    srv, runtime, client, oai = server
    expected = oai.chat.completions.create(model="default", messages=SHORT, temperature=0, max_tokens=60)
    reply = client.generate(model=runtime.model_id, prompt="Say yes.", options={"temperature": 0, "num_predict": 60})
    assert reply.response == expected.choices[0].message.content and reply.done_reason == "stop"
    parts = list(client.generate(model=runtime.model_id, prompt="Say yes.", stream=True,
                                 options={"temperature": 0, "num_predict": 60}))
    assert "".join(p.response for p in parts) == reply.response and parts[-1].done
    raw = client.generate(model=runtime.model_id, prompt="The cat", raw=True, options={"temperature": 0,
                                                                                       "num_predict": 12})
    text = oai.completions.create(model="default", prompt="The cat", temperature=0, max_tokens=12)
    assert raw.response == text.choices[0].text and raw.eval_count == 12
    loaded = client.generate(model=runtime.model_id)   # an empty prompt loads the model
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""


def test_format_json_is_constrained(server):
    srv, runtime, client, _ = server
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
              "required": ["answer"], "additionalProperties": False}
    reply = client.chat(model=runtime.model_id, messages=SHORT, format=schema, stream=False,
                        options={"temperature": 0, "num_predict": 40})
    assert json.loads(reply.message.content)["answer"] in ("yes", "no")
    loose = client.generate(model=runtime.model_id, prompt="Say yes.", format="json",
                            options={"temperature": 0, "num_predict": 40})
    assert isinstance(json.loads(loose.response), dict)


def test_tags_show_ps_and_version(server):
    srv, runtime, client, _ = server
    assert [m.model for m in client.list().models] == [runtime.model_id]
    shown = client.show(runtime.model_id)
    assert shown.modelinfo["switchyard.context_length"] == runtime.context_length
    assert [m.model for m in client.ps().models] == [runtime.model_id]
    assert httpx.get(srv.base_url + "/api/version").json()["version"]
    missing = httpx.post(srv.base_url + "/api/pull", json={"model": "llama3"})
    # in Ollama's error shape, as every error under /api/ (the ollama client raises ResponseError with it)
    assert missing.status_code == 404 and "/api/chat" in missing.json()["error"]
    with pytest.raises(ollama.ResponseError) as caught:
        client.pull("llama3")
    assert caught.value.status_code == 404 and "model management" in caught.value.error


def test_ndjson_stream_is_the_default_on_the_wire(server):
    """Ollama streams unless the body says `stream: false` (the ollama client always sends it; curl and
    other clients leave it out): NDJSON lines, each a JSON object, the last one done."""
    srv, runtime, _, _ = server
    with httpx.stream("POST", srv.base_url + "/api/chat", json={
            "model": runtime.model_id, "messages": SHORT, "options": {"temperature": 0, "num_predict": 8}}) as response:
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert len(lines) > 2 and lines[-1]["done"] and lines[-1]["eval_count"] == 8
    assert not any(line["done"] for line in lines[:-1])


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"


def test_tools_thinking_and_tool_history(qwen_chat_tokenizer):
    """Tools through the model's template (Qwen3.6's XML calls, scripted replies): a call comes back as Ollama's
    tool_calls (arguments an object), the thinking as `thinking`; a history with the call and its tool result
    renders through the template; `think: false` turns thinking off."""
    from tests.fakes import FakeBackend

    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply=f"Need the weather.\n</think>\n\n{CALL}")
    with live_server(create_app(backend)) as srv:
        client = ollama.Client(host=srv.base_url)
        ask = [{"role": "user", "content": "Weather in Paris?"}]
        reply = client.chat(model=backend.model_id, messages=ask, tools=[WEATHER], stream=False)
        assert reply.message.thinking == "Need the weather.\n"
        (call,) = reply.message.tool_calls
        assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
        streamed = [p for p in client.chat(model=backend.model_id, messages=ask, tools=[WEATHER], stream=True)
                    if p.message.tool_calls]
        assert streamed[0].message.tool_calls[0].function.arguments == {"city": "Paris"}
        backend.reply = "It is sunny."
        history = [*ask, {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "sunny, 21C", "tool_name": "get_weather"}]
        answer = client.chat(model=backend.model_id, messages=history, tools=[WEATHER], stream=False, think=False)
        assert answer.message.content == "It is sunny."
        prompt = backend.encoded[-1]
        assert "<function=get_weather>" in prompt and "sunny, 21C" in prompt
        assert prompt.endswith("<think>\n\n</think>\n\n")   # think false: the template's thinking off
        # clients check the capability before they send `think` (Qwen3.6's template opens a thinking block)
        assert "thinking" in client.show(backend.model_id).capabilities


def test_load_and_unload_calls_answer_at_once(server):
    """Ollama's load call (an empty prompt or conversation, as Open WebUI and the ollama CLI send to warm a
    model up) and unload call (keep_alive 0): answered done at once; the one model stays loaded."""
    srv, runtime, client, _ = server
    assert client.chat(model=runtime.model_id, messages=[]).done_reason == "load"
    unloaded = httpx.post(srv.base_url + "/api/chat", json={"model": runtime.model_id, "messages": [],
                                                            "keep_alive": 0}).json()
    assert unloaded["done"] and unloaded["done_reason"] == "unload"
    assert client.generate(model=runtime.model_id, keep_alive=0).done_reason == "unload"
    missing = httpx.post(srv.base_url + "/api/generate", json={"model": "llama3"})
    assert missing.status_code == 404 and "llama3" in missing.json()["error"]


def test_options_on_openai_chat_and_completions():
    """Ollama's `options` sent to the OpenAI endpoints (clients that speak Ollama send it there too) were a 400
    "Unrecognized request argument supplied: options": they are read as the sampling fields they stand for, a
    top-level field winning; an option not run here is a 400 naming it."""
    from tests.fakes import FakeBackend

    backend = FakeBackend()
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        options = {"temperature": 0.3, "top_k": 7, "num_predict": 3, "seed": 11, "repeat_penalty": 1.2,
                   "stop": ["zzz"], "num_ctx": 8192}
        reply = client.chat.completions.create(model="default", messages=SHORT, top_p=0.5,
                                               extra_body={"options": options})
        params = backend.calls[-1]["params"]
        assert (params.temperature, params.top_k, params.max_tokens, params.seed, params.repetition_penalty,
                params.stop, params.top_p) == (0.3, 7, 3, 11, 1.2, ("zzz",), 0.5)
        assert params.repetition_window == 64   # Ollama's repeat_last_n where the options leave it out
        assert reply.usage.completion_tokens == 3
        client.completions.create(model="default", prompt="Hi", temperature=0.9,
                                  extra_body={"options": {"temperature": 0.1, "num_predict": 2}})
        params = backend.calls[-1]["params"]
        assert (params.temperature, params.max_tokens) == (0.9, 2)   # the top-level field wins
        for bad, words in (({"mirostat": 2}, "mirostat"), ({"nonsense": 1}, "nonsense")):
            response = httpx.post(srv.base_url + "/v1/chat/completions",
                                  json={"messages": SHORT, "options": bad})
            assert response.status_code == 400 and words in response.json()["error"]["message"], response.text


def test_root_answers_as_ollama_does_and_stays_open():
    """GET / (and HEAD /) answer Ollama's "Ollama is running", which clients probe before they talk to a
    server; like /health it needs no key, while the API behind it still does."""
    from gateway.config import GatewayConfig
    from tests.fakes import FakeBackend

    with live_server(create_app(FakeBackend(), config=GatewayConfig(api_keys=("sekret",)))) as srv:
        root = httpx.get(srv.base_url + "/")
        assert root.status_code == 200 and root.text == "Ollama is running"
        assert root.headers["content-type"].startswith("text/plain")
        assert httpx.head(srv.base_url + "/").status_code == 200
        refused = httpx.get(srv.base_url + "/api/tags")   # refused before any handler, still in Ollama's shape
        assert refused.status_code == 401 and "API key" in refused.json()["error"]
        with pytest.raises(ollama.ResponseError) as caught:
            ollama.Client(host=srv.base_url).chat(model="x", messages=SHORT)
        assert caught.value.status_code == 401 and "API key" in caught.value.error
        keyed = ollama.Client(host=srv.base_url, headers={"Authorization": "Bearer sekret"})
        assert keyed.list().models
        assert keyed.show("fake-model").capabilities == ["completion", "tools"]   # a template without thinking
