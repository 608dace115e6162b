"""What coding agents and chat UIs need, through the HTTP API with the official openai SDK: tool
calling (stream and non-stream, history round trips, tool_choice), reasoning split from the answer,
chat_template_kwargs / reasoning_effort, n > 1, logprobs shapes, penalties passed through, CORS.

The backend is the fake one with a real Qwen3.6 tokenizer: prompts render through the published
chat template and replies are split by the same code the runtime uses, while the model's text is
scripted (a random tiny model never writes a well-formed tool call)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from gateway.config import GatewayConfig
from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]

THOUGHT = "The user wants the weather. I should call the tool."
CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
SECOND = "<tool_call>\n<function=search>\n<parameter=query>\nParis events\n</parameter>\n</function>\n</tool_call>"


@pytest.fixture
def agent(qwen_chat_tokenizer):
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply=f"{THOUGHT}\n</think>\n\n{CALL}")
    with live_server(create_app(backend, config=GatewayConfig(allowed_origins=("http://localhost:3000",)))) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        yield srv, client, backend


def _prompt(backend: FakeBackend) -> str:
    return backend.encoded[-1]


def test_tool_call_non_streaming(agent):
    srv, client, backend = agent
    completion = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER])
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 3}   # typed from the schema
    assert choice.message.content is None
    extra = choice.message.model_extra
    assert extra["reasoning_content"] == extra["reasoning"] == THOUGHT + "\n"
    prompt = _prompt(backend)
    assert "<tools>" in prompt and '"name": "get_weather"' in prompt and prompt.endswith("<think>\n")
    assert backend.chats[-1]["tools"][0]["function"]["name"] == "get_weather"


def test_tool_call_streaming_accumulates_like_the_sdk(agent):
    srv, client, backend = agent
    backend.reply = f"{THOUGHT}\n</think>\n\nLet me look. {CALL}\n{SECOND}"
    stream = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER, SEARCH], stream=True)
    calls: dict[int, dict] = {}
    content, reasoning, finish = "", "", None
    for chunk in stream:
        delta = chunk.choices[0].delta
        content += delta.content or ""
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        for tc in delta.tool_calls or []:
            slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] += tc.id or ""
            slot["name"] += tc.function.name or ""
            slot["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert reasoning == THOUGHT + "\n" and content.strip() == "Let me look."
    assert [calls[i]["name"] for i in sorted(calls)] == ["get_weather", "search"]
    assert json.loads(calls[1]["arguments"]) == {"query": "Paris events"}
    assert calls[0]["id"] != calls[1]["id"]


def test_parallel_tool_calls_false_keeps_the_first(agent):
    srv, client, backend = agent
    backend.reply = f"{THOUGHT}\n</think>\n\n{CALL}\n{SECOND}"
    completion = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER, SEARCH],
                                                parallel_tool_calls=False)
    assert [c.function.name for c in completion.choices[0].message.tool_calls] == ["get_weather"]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert backend.steps_run[-1] < len(backend.reply.split(" "))   # generation stopped after the first call


def test_history_with_tool_calls_and_results_renders_through_the_template(agent):
    srv, client, backend = agent
    backend.reply = "Done.\n</think>\n\nIt is 18 degrees and sunny in Paris."
    history = [*ASK,
               {"role": "assistant", "content": None, "reasoning_content": "need the tool",
                "tool_calls": [{"id": "call_1", "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 1}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"}]
    completion = client.chat.completions.create(model="default", messages=history, tools=[WEATHER])
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.content == "It is 18 degrees and sunny in Paris."
    prompt = _prompt(backend)
    assert "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n1\n</parameter>" in prompt
    assert "<tool_response>\n18C, sunny\n</tool_response>" in prompt
    assert "<think>\nneed the tool\n</think>" in prompt      # reasoning of the turn in progress is kept
    # the SDK's own message object can be sent back as history unchanged
    message = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER]).choices[0].message
    backend.reply = "ok"
    follow = [*ASK, message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": "x", "content": "1"}]
    assert client.chat.completions.create(model="default", messages=follow, tools=[WEATHER]).choices[0]


def test_bad_tool_call_arguments_in_history_are_a_400(agent):
    srv, client, backend = agent
    history = [*ASK, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}}]}]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="default", messages=history, tools=[WEATHER])
    assert "arguments" in bad.value.message


def test_tool_choice_none_required_and_named(agent):
    srv, client, backend = agent
    backend.reply = f"{THOUGHT}\n</think>\n\n{CALL}"
    none = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER], tool_choice="none")
    assert "<tools>" in _prompt(backend)                          # shown, not callable: a call written anyway
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content == ""   # is dropped
    assert backend.calls[-1]["params"].grammar is None            # no grammar: only the call's opening is banned
    client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER], tool_choice="auto")
    assert backend.calls[-1]["params"].grammar is None
    backend.reply = "<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>"
    required = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER], tool_choice="required")
    assert _prompt(backend).endswith("</think>\n\n<tool_call>\n")   # thinking off, the call opened
    assert "<function=" in backend.calls[-1]["params"].grammar   # the rest is decoded to a call (engines.forced_call)
    assert json.loads(required.choices[0].message.tool_calls[0].function.arguments) == {"city": "Rome"}
    backend.reply = "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"
    named = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER, SEARCH],
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert _prompt(backend).endswith("<tool_call>\n<function=get_weather>\n")
    call = named.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Oslo"}
    assert named.choices[0].finish_reason == "tool_calls"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER],
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
    assert bad.value.body["param"] == "tool_choice" and bad.value.body["code"] == "unknown_tool"


def test_a_malformed_call_stays_text(agent):
    srv, client, backend = agent
    backend.reply = "ok\n</think>\n\n<tool_call>\nnot a call at all\n</tool_call>"
    message = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER]).choices[0].message
    assert message.tool_calls is None and "not a call at all" in message.content


def test_thinking_switches(agent):
    srv, client, backend = agent
    backend.reply = "Plain answer."
    client.chat.completions.create(model="default", messages=ASK, extra_body={
        "chat_template_kwargs": {"enable_thinking": False}})
    assert _prompt(backend).endswith("<think>\n\n</think>\n\n")
    message = client.chat.completions.create(model="default", messages=ASK, reasoning_effort="none").choices[0].message
    assert _prompt(backend).endswith("<think>\n\n</think>\n\n")
    assert message.content == "Plain answer." and message.model_extra.get("reasoning_content") is None
    client.chat.completions.create(model="default", messages=ASK, reasoning_effort="high")
    assert _prompt(backend).endswith("<think>\n")
    # a JSON response_format turns thinking off (the constraint shapes the reply from its first token)
    client.chat.completions.create(model="default", messages=ASK, response_format={"type": "json_object"})
    assert _prompt(backend).endswith("</think>\n\n") and backend.calls[-1]["params"].grammar is not None


def test_reasoning_streams_separately_and_the_classifier_reads_the_ask(agent):
    srv, client, backend = agent
    backend.reply = f"{THOUGHT}\n</think>\n\nThe answer."
    stream = client.chat.completions.create(model="default", messages=ASK, stream=True)
    deltas = [c.choices[0].delta for c in stream if c.choices]
    reasoning = "".join((d.model_extra or {}).get("reasoning") or "" for d in deltas)
    content = "".join(d.content or "" for d in deltas)
    assert reasoning == THOUGHT + "\n" and content == "The answer." and "</think>" not in content


def test_n_choices_are_generated_with_distinct_seeds(agent):
    srv, client, backend = agent
    backend.reply = "a b c"
    completion = client.chat.completions.create(model="default", messages=ASK, n=3, seed=7, max_tokens=2,
                                                reasoning_effort="none")
    assert [c.index for c in completion.choices] == [0, 1, 2]
    assert [call["params"].seed for call in backend.calls[-3:]] == [7, 8, 9]
    assert completion.usage.completion_tokens == 6
    chunks = list(client.chat.completions.create(model="default", messages=ASK, n=2, max_tokens=2, stream=True,
                                                 reasoning_effort="none"))
    by_index: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            by_index[choice.index] = by_index.get(choice.index, "") + (choice.delta.content or "")
    assert by_index == {0: "a b", 1: "a b"}


def test_penalties_and_logprobs_reach_the_engine(agent):
    srv, client, backend = agent
    backend.reply = "x y"
    client.chat.completions.create(model="default", messages=ASK, presence_penalty=1.5, frequency_penalty=0.5,
                                   logprobs=True, top_logprobs=4, extra_body={"repetition_penalty": 1.1})
    params = backend.calls[-1]["params"]
    assert (params.presence_penalty, params.frequency_penalty, params.repetition_penalty) == (1.5, 0.5, 1.1)
    assert params.logprobs and params.top_logprobs == 4


def test_cors_for_browser_clients(agent):
    srv, client, backend = agent
    origin = {"Origin": "http://localhost:3000"}
    preflight = httpx.options(srv.base_url + "/v1/chat/completions", headers={
        **origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "http://localhost:3000"
    response = httpx.post(srv.base_url + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 1}, headers=origin)
    assert response.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "x-switchyard-engine" in response.headers["access-control-expose-headers"].lower()
    other = httpx.post(srv.base_url + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 1},
                       headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in other.headers


def test_no_cors_headers_unless_configured():
    with live_server(create_app(FakeBackend())) as srv:
        response = httpx.post(srv.base_url + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 1},
                              headers={"Origin": "http://localhost:3000"})
        assert response.status_code == 200 and "access-control-allow-origin" not in response.headers


def test_tools_on_a_model_without_a_tool_format_are_a_clear_400():
    import tempfile

    from mlx_lm.utils import load_tokenizer

    from engines.testing import write_target_checkpoint

    plain = load_tokenizer(write_target_checkpoint(tempfile.mkdtemp(), seed=0))
    with live_server(create_app(FakeBackend(tokenizer=plain))) as srv:
        response = httpx.post(srv.base_url + "/v1/chat/completions", json={"messages": ASK, "tools": [WEATHER]})
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "tools_unsupported"


def test_json_style_tool_calls_on_the_demo_template(demo_tokenizer):
    """The embedded model's template writes Hermes-style JSON calls (mlx-lm's json_tools parser)."""
    reply = 'Checking. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'
    backend = FakeBackend(tokenizer=demo_tokenizer, reply=reply)
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        message = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER]).choices[0].message
        assert message.content == "Checking."
        assert message.tool_calls[0].function.name == "get_weather"
        assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Paris", "days": 2}
        assert '"name": "get_weather"' in backend.encoded[-1] and "<tools>" in backend.encoded[-1]
        backend.reply = '{"city": "Oslo"}}\n</tool_call>'
        forced = client.chat.completions.create(model="default", messages=ASK, tools=[WEATHER],
                                                tool_choice={"type": "function", "function": {"name": "get_weather"}})
        assert backend.encoded[-1].endswith('<tool_call>\n{"name": "get_weather", "arguments": ')
        assert forced.choices[0].finish_reason == "tool_calls"
        assert json.loads(forced.choices[0].message.tool_calls[0].function.arguments) == {"city": "Oslo"}


def test_include_reasoning_false_leaves_the_thinking_out(agent):
    """vLLM's include_reasoning: false (as Open WebUI and litellm pass it): no reasoning_content / reasoning,
    in the body or the stream; the answer and the usage's reasoning_tokens are unchanged."""
    srv, client, backend = agent
    backend.reply = f"{THOUGHT}\n</think>\n\nIt is sunny."
    completion = client.chat.completions.create(model="default", messages=ASK, extra_body={"include_reasoning": False})
    message = completion.choices[0].message
    assert message.content == "It is sunny."
    assert message.model_extra.get("reasoning_content") is None and message.model_extra.get("reasoning") is None
    assert completion.usage.completion_tokens_details.reasoning_tokens > 0
    chunks = list(client.chat.completions.create(model="default", messages=ASK, stream=True,
                                                 extra_body={"include_reasoning": False}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == "It is sunny."
    assert not any((d.model_extra or {}).get("reasoning_content") or (d.model_extra or {}).get("reasoning")
                   for d in deltas)
    kept = client.chat.completions.create(model="default", messages=ASK, extra_body={"include_reasoning": True})
    assert kept.choices[0].message.model_extra["reasoning_content"] == THOUGHT + "\n"
