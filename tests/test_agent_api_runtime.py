"""The agent API end to end on real models through the openai SDK: the embedded demo model (its
template offers tools as JSON tool calls) and a generated checkpoint with Qwen3.6's published
template. Structured output validates under every engine and greedy engines agree; logprobs come
from the target; thinking is split out of the answer."""

from __future__ import annotations

import json

import openai
import pytest

from gateway.http.app import create_app
from tests.fakes import live_server, served_demo

SCHEMA = {"type": "object", "properties": {"language": {"type": "string", "enum": ["python", "rust", "go"]},
                                           "stars": {"type": "integer", "minimum": 1, "maximum": 5}},
          "required": ["language", "stars"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "Which language should I learn? Answer in JSON."}]


@pytest.fixture(scope="module")
def demo():
    with served_demo() as (srv, runtime):
        yield openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0), runtime


def test_json_schema_output_validates_and_greedy_engines_agree(demo):
    client, runtime = demo
    contents = {}
    for engine in runtime.engine_names:
        completion = client.chat.completions.create(
            model="default", messages=ASK, temperature=0, max_tokens=64, extra_body={"engine": engine},
            response_format={"type": "json_schema", "json_schema": {"name": "pick", "schema": SCHEMA, "strict": True}})
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        value = json.loads(choice.message.content)
        assert value["language"] in ("python", "rust", "go") and 1 <= value["stars"] <= 5
        contents[engine] = choice.message.content
    assert len(set(contents.values())) == 1, contents
    loose = client.chat.completions.create(model="default", messages=ASK, temperature=0.8, seed=3, max_tokens=48,
                                           response_format={"type": "json_object"})
    if loose.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(loose.choices[0].message.content), dict)


def test_logprobs_through_the_sdk(demo):
    client, runtime = demo
    completion = client.chat.completions.create(model="default", messages=ASK, temperature=0, max_tokens=8,
                                                logprobs=True, top_logprobs=2, extra_body={"engine": "ddtree"})
    content = completion.choices[0].logprobs.content
    assert len(content) == completion.usage.completion_tokens
    assert "".join(t.token for t in content) == completion.choices[0].message.content
    for token in content:
        assert token.logprob <= 0 and len(token.top_logprobs) == 2
        assert token.top_logprobs[0].token == token.token     # greedy
        assert bytes(token.bytes).decode("utf-8", "replace") == token.token
    text = client.completions.create(model="default", prompt="def add(a, b):", max_tokens=4, temperature=0, logprobs=3)
    logprobs = text.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == 4 and all(len(t) == 3 for t in logprobs.top_logprobs)


def test_logit_bias_bans_and_forces_tokens(demo):
    client, runtime = demo
    ask = dict(model="default", messages=ASK, temperature=0, max_tokens=6, logprobs=True)
    plain = client.chat.completions.create(**ask).choices[0].logprobs.content
    first = runtime.bundle.tokenizer.encode(plain[0].token, add_special_tokens=False)
    assert len(first) == 1
    for engine in runtime.engine_names:
        banned = client.chat.completions.create(**ask, logit_bias={str(first[0]): -100}, extra_body={"engine": engine})
        assert banned.choices[0].logprobs.content[0].token != plain[0].token, engine
        forced = client.chat.completions.create(**ask, logit_bias={"42": 100}, extra_body={"engine": engine})
        assert all(t.token == runtime.bundle.tokenizer.decode([42]) for t in forced.choices[0].logprobs.content)
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(**ask, logit_bias={"999999": 1})
    assert error.value.body["param"] == "logit_bias" and "vocabulary" in error.value.body["message"]


def test_logprobs_of_constrained_tokens_are_json_numbers(demo):
    """A grammar (a JSON schema, a forced call) leaves one allowed token at many steps, so the alternatives
    asked for have no chance: they come back as OpenAI's -9999.0, not -inf, which JSON cannot carry (the
    non-streamed reply was a 500, the stream sent -Infinity that strict JSON parsers reject)."""
    import httpx

    client, runtime = demo
    schema = {"type": "json_schema", "json_schema": {"name": "pick", "schema": SCHEMA, "strict": True}}
    completion = client.chat.completions.create(model="default", messages=ASK, temperature=0, max_tokens=24,
                                                logprobs=True, top_logprobs=3, response_format=schema)
    values = [v for t in completion.choices[0].logprobs.content for v in (t.logprob, *(a.logprob for a in t.top_logprobs))]
    assert values and min(values) == -9999.0 and all(-9999.0 <= v <= 0 for v in values)
    forced = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Weather?"}],
                                            tools=[WEATHER], tool_choice="required", max_tokens=16,
                                            logprobs=True, top_logprobs=2)
    assert forced.choices[0].finish_reason in ("tool_calls", "length")
    body = {"model": "default", "messages": ASK, "max_tokens": 12, "temperature": 0, "logprobs": True,
            "top_logprobs": 3, "response_format": schema, "stream": True}
    with httpx.stream("POST", str(client.base_url) + "chat/completions", json=body, timeout=60) as response:
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    for event in events:   # strict JSON: no NaN / Infinity tokens
        json.loads(event, parse_constant=lambda name: pytest.fail(f"{name} in {event[:120]}"))


def test_tools_and_forced_calls_on_the_demo_model(demo):
    client, runtime = demo
    completion = client.chat.completions.create(model="default", messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                              "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"}], tools=[WEATHER], max_tokens=8)
    assert completion.choices[0].finish_reason in ("stop", "length", "tool_calls")
    stream = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Weather?"}],
                                            tools=[WEATHER], max_tokens=8, stream=True,
                                            tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert [c for c in stream]   # a forced call on an untrained model: streams, ends, never a 500


def test_qwen_template_splits_thinking_on_a_real_runtime(tiny_qwen_chat_target):
    from engines.runtime import load_runtime

    runtime = load_runtime(str(tiny_qwen_chat_target))
    with live_server(create_app(runtime)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        thinking = client.chat.completions.create(model="default", messages=ASK, max_tokens=12, temperature=0,
                                                  tools=[WEATHER])
        message = thinking.choices[0].message
        assert message.model_extra["reasoning_content"] and not message.content   # still thinking at the limit
        quiet = client.chat.completions.create(model="default", messages=ASK, max_tokens=12, temperature=0,
                                               reasoning_effort="none")
        assert quiet.choices[0].message.content and quiet.choices[0].message.model_extra.get("reasoning_content") is None
