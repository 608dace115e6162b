"""The gateway through the official openai client, against the real uvicorn server and a fake backend."""

from __future__ import annotations

import httpx
import openai
import pytest

from contracts.engine import SwitchRule
from contracts.request_text import RequestText
from gateway.http.app import create_app
from gateway.routing.interface import RouteDecision
from tests.fakes import DEFAULT_REPLY, FakeBackend, RecordingRouter, fake_chat_template, live_server

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def env():
    backend = FakeBackend()
    router = RecordingRouter()
    with live_server(create_app(backend, router=router)) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=30)
        yield server, client, backend, router


def test_chat_completion_non_streaming(env):
    server, client, backend, router = env
    raw = client.chat.completions.with_raw_response.create(model="fake-model", messages=MESSAGES, max_tokens=4)
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == backend.model_id
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == " ".join(DEFAULT_REPLY.split()[:4])
    assert choice.finish_reason == "length"
    # the chat template was applied to exactly these messages, and usage counts its tokens
    assert backend.encoded[-1] == fake_chat_template(MESSAGES)
    assert completion.usage.prompt_tokens == len(fake_chat_template(MESSAGES))
    assert completion.usage.completion_tokens == 4
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 4
    assert raw.headers["x-switchyard-engine"] == "mtp"
    assert raw.headers["x-switchyard-class"] == "code"
    assert raw.headers["x-switchyard-route-reason"] == "monitor"


def test_chat_streaming_shape_and_usage(env):
    server, client, backend, router = env
    chunks = list(
        client.chat.completions.create(
            model="default", messages=MESSAGES, max_tokens=3, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c for c in chunks if c.choices]
    assert all(c.choices[0].delta.role is None for c in content[1:])
    assert "".join(c.choices[0].delta.content or "" for c in content) == "The quick brown"
    assert [c.choices[0].finish_reason for c in content] == [None, None, None, None, "length"]
    assert content[-2].choices[0].delta.content == " brown"
    assert content[-1].choices[0].delta.content is None  # the finish in a chunk of its own, as OpenAI's
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    assert usage_chunk.usage.completion_tokens == 3
    assert usage_chunk.usage.prompt_tokens == len(fake_chat_template(MESSAGES))


def test_stream_raw_frames_end_with_done(env):
    server, *_ = env
    with httpx.stream("POST", server.base_url + "/v1/chat/completions",
                      json={"messages": MESSAGES, "stream": True, "max_tokens": 2}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-switchyard-engine"] == "mtp"
        frames = [line for line in response.iter_lines() if line]
    assert frames[-1] == "data: [DONE]"
    assert all(f.startswith("data: ") for f in frames)
    assert not any('"usage"' in f for f in frames)  # no usage chunk unless asked for


def test_stop_sequence_finishes_with_stop(env):
    server, client, *_ = env
    completion = client.chat.completions.create(model="default", messages=MESSAGES, stop=[" fox", "zzz"])
    assert completion.choices[0].message.content == "The quick brown"
    assert completion.choices[0].finish_reason == "stop"


def test_whole_reply_finishes_with_stop(env):
    server, client, *_ = env
    completion = client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=100)
    assert completion.choices[0].message.content == DEFAULT_REPLY
    assert completion.choices[0].finish_reason == "stop"


def test_sampling_params_reach_backend(env):
    server, client, backend, router = env
    client.chat.completions.create(
        model="default", messages=MESSAGES, max_completion_tokens=7, temperature=0.5, top_p=0.9, seed=11,
        stop="zz", extra_body={"top_k": 20, "min_p": 0.05},
    )
    params = backend.calls[-1]["params"]
    assert (params.max_tokens, params.temperature, params.top_p, params.top_k, params.min_p, params.seed, params.stop) == (
        7, 0.5, 0.9, 20, 0.05, 11, ("zz",)
    )


def test_default_max_tokens_and_defaults_left_to_model(env):
    server, client, backend, router = env
    client.chat.completions.create(model="default", messages=MESSAGES)
    params = backend.calls[-1]["params"]
    # unasked: up to the context's end (the default 32768 shortened to the room the prompt leaves)
    assert params.max_tokens == backend.context_length - len(backend.calls[-1]["prompt_ids"])
    assert params.temperature is None and params.top_p is None and params.seed is None


def test_prompt_that_fills_the_context_without_max_tokens_is_refused_plainly(env):
    """Unasked max_tokens is shortened to the room the prompt leaves; with no room left the 400 is about
    the prompt, not about a max_tokens the client never sent."""
    server, client, backend, router = env
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="default", prompt="y" * backend.context_length)
    assert err.value.body["code"] == "context_length_exceeded"
    assert "max_tokens" not in err.value.body["message"] and str(backend.context_length) in err.value.body["message"]


def test_text_completion_non_streaming_and_streaming(env):
    server, client, backend, router = env
    completion = client.completions.create(model="default", prompt="Once upon", max_tokens=2)
    assert completion.object == "text_completion"
    assert completion.choices[0].text == "The quick"
    assert completion.choices[0].finish_reason == "length"
    assert backend.encoded[-1] == "Once upon"
    assert completion.usage.prompt_tokens == len("Once upon")
    chunks = list(client.completions.create(model="default", prompt=["Once upon"], max_tokens=2, stream=True,
                                            stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == "The quick"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 2


def test_list_of_text_parts_and_developer_role(env):
    server, client, backend, router = env
    client.chat.completions.create(
        model="default", max_tokens=1,
        messages=[{"role": "developer", "content": "Rules."},
                  {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
    )
    assert backend.encoded[-1] == fake_chat_template([{"role": "system", "content": "Rules."}, {"role": "user", "content": "a\nb"}])
    request = router.requests[-1]
    assert request.text == RequestText(system="Rules.", user="a\nb")


def test_router_sees_texts_and_every_step(env):
    server, client, backend, router = env
    before_obs, before_fin = len(router.observed), len(router.finished_calls)
    client.chat.completions.create(
        model="default", max_tokens=3,
        messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "u1"},
                  {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}],
    )
    request = router.requests[-1]
    assert request.text == RequestText(system="S", user="u2", history="u1\na1", last_reply="a1")
    assert request.forced_engine is None and request.text.response_format is None
    assert request.prompt_tokens == len(backend.calls[-1]["prompt_ids"])
    assert len(router.observed) - before_obs == 3
    assert router.finished_calls[-1][1] is None and len(router.finished_calls) == before_fin + 1
    assert router.threads == backend.threads and len(backend.threads) == 1  # all on the one worker thread


def test_forced_engine_by_field_and_header(env):
    server, client, backend, router = env
    raw = client.chat.completions.with_raw_response.create(
        model="default", messages=MESSAGES, max_tokens=1, extra_body={"engine": "raw"}
    )
    assert raw.headers["x-switchyard-engine"] == "raw"
    assert raw.headers["x-switchyard-route-reason"] == "forced"
    assert backend.calls[-1]["engine"] == "raw"
    raw = client.chat.completions.with_raw_response.create(
        model="default", messages=MESSAGES, max_tokens=1, extra_headers={"X-Switchyard-Engine": "mtp"}
    )
    assert raw.headers["x-switchyard-engine"] == "mtp" and router.requests[-1].forced_engine == "mtp"
    client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=1, extra_body={"engine": "auto"})
    assert router.requests[-1].forced_engine is None


def test_response_format_text_reaches_router(env):
    server, client, backend, router = env
    client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=1, response_format={"type": "text"})
    assert router.requests[-1].text.response_format == "text"


def test_models_and_health(env):
    server, client, backend, router = env
    models = client.models.list()
    assert [m.id for m in models.data] == [backend.model_id]
    assert client.models.retrieve("fake-model").id == "fake-model"   # the name asked for, as listed
    health = httpx.get(server.base_url + "/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert health.json()["engines"] == ["raw", "mtp"]


def test_model_aliases_accepted(env):
    server, client, backend, router = env
    for name in (backend.model_id, "fake-model", "default"):
        assert client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=1).choices


def test_static_router_defaults_to_raw_fallback():
    backend = FakeBackend()
    with live_server(create_app(backend)) as server:
        response = httpx.post(server.base_url + "/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 1})
        assert response.status_code == 200
        assert response.headers["x-switchyard-engine"] == "raw"
        assert response.headers["x-switchyard-class"] == "prose"
        assert response.headers["x-switchyard-route-reason"] == "fallback"
        forced = httpx.post(server.base_url + "/v1/chat/completions",
                            json={"messages": MESSAGES, "max_tokens": 1}, headers={"X-Switchyard-Engine": "mtp"})
        assert forced.headers["x-switchyard-engine"] == "mtp"
        assert forced.headers["x-switchyard-route-reason"] == "forced"
        assert backend.calls[-1]["engine"] == "mtp"


def test_switch_rule_of_the_decision_reaches_the_backend():
    rule = SwitchRule(window=4, costs={"mtp": 1.25})
    backend = FakeBackend()
    router = RecordingRouter(decision=RouteDecision(engine="mtp", klass="code", reason="monitor", switch=rule))
    with live_server(create_app(backend, router=router)) as server:
        assert httpx.post(server.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}).status_code == 200
    assert backend.calls[-1]["switch"] is rule and backend.calls[-1]["engine"] == "mtp"


def test_routed_decision_object_is_passed_back_to_router():
    decision = RouteDecision(engine="raw", klass="prose", reason="explore")
    router = RecordingRouter(decision=decision)
    with live_server(create_app(FakeBackend(), router=router)) as server:
        httpx.post(server.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 2})
    assert all(d is decision for d, _ in router.observed)
    assert router.finished_calls == [(decision, None)]


def test_router_is_told_the_decoding_mode(env):
    """temperature 0 is greedy; an unset temperature decodes with the model's default (sampled)."""
    server, client, backend, router = env
    client.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}], temperature=0)
    assert router.requests[-1].sampled is False
    client.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}])
    assert backend.default_temperature > 0 and router.requests[-1].sampled is True
    client.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}], temperature=0.7)
    assert router.requests[-1].sampled is True
