"""Embeddings through the clients that ask for them: the openai SDK (`client.embeddings.create`, base64 by default)
and the ollama client (`embed`, and the older `embeddings`), on a fake backend for the API's rules and on the
embedded demo model for the vectors themselves (the mean of the target's final hidden states, engines.embed)."""

from __future__ import annotations

import base64

import httpx
import mlx.core as mx
import numpy as np
import ollama
import openai
import pytest

from gateway.config import GatewayConfig
from gateway.http.app import create_app
from gateway.http.embeddings import unit
from tests.fakes import FAKE_VOCAB, FakeBackend, live_server, served_demo


def _fake_vector(backend: FakeBackend, text: str) -> np.ndarray:
    ids = [ord(c) % FAKE_VOCAB for c in text]
    return np.bincount([t % backend.embedding_size for t in ids], minlength=backend.embedding_size) / len(ids)


@pytest.fixture
def fake():
    backend = FakeBackend()
    with live_server(create_app(backend, config=GatewayConfig(max_embedding_inputs=4))) as srv:
        yield srv, backend


def _openai(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)


def test_openai_sdk_gets_unit_vectors_in_order_base64_and_float(fake):
    srv, backend = fake
    texts = ["hello world", "abcabc", "zz top"]
    got = _openai(srv).embeddings.create(model=backend.model_id, input=texts)   # the SDK asks for base64
    assert [d.index for d in got.data] == [0, 1, 2] and got.object == "list" and got.model == backend.model_id
    for data, text in zip(got.data, texts):
        np.testing.assert_allclose(data.embedding, unit(_fake_vector(backend, text)), rtol=1e-6)
        assert abs(np.linalg.norm(data.embedding) - 1) < 1e-6
    assert got.usage.prompt_tokens == got.usage.total_tokens == sum(map(len, texts))
    floats = _openai(srv).embeddings.create(model=backend.model_id, input="hello world", encoding_format="float")
    np.testing.assert_allclose(floats.data[0].embedding, got.data[0].embedding, rtol=1e-6)
    raw = httpx.post(srv.base_url + "/v1/embeddings", json={"input": "hello world", "encoding_format": "base64"}).json()
    decoded = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(decoded, got.data[0].embedding, rtol=1e-6)
    # the path without /v1 (a base URL configured without it) is the same route
    assert httpx.post(srv.base_url + "/embeddings", json={"input": "hello world"}).status_code == 200


def test_token_id_inputs_and_dimensions(fake):
    srv, backend = fake
    client = _openai(srv)
    one = client.embeddings.create(model=backend.model_id, input=[104, 105])   # one text, tokenized by the client
    assert len(one.data) == 1 and one.usage.prompt_tokens == 2
    np.testing.assert_allclose(one.data[0].embedding, unit(_fake_vector(backend, "hi")), rtol=1e-6)
    two = client.embeddings.create(model=backend.model_id, input=[[104, 105], [97]])
    assert len(two.data) == 2 and two.usage.prompt_tokens == 3
    assert backend.embedded[-2:] == [[104, 105], [97]]
    # dimensions: the first d components, renormalised (as OpenAI's text-embedding-3 reads it)
    cut = client.embeddings.create(model=backend.model_id, input="abcdefgh", dimensions=8)
    full = _fake_vector(backend, "abcdefgh")
    np.testing.assert_allclose(cut.data[0].embedding, unit(full[:8]), rtol=1e-6)
    assert len(cut.data[0].embedding) == 8


@pytest.mark.parametrize("body,param,code,words", [
    ({"input": ""}, "input", None, "empty"),
    ({"input": ["a", ""]}, "input", None, "input[1] is empty"),
    ({"input": []}, "input", "invalid_value", "empty list"),
    ({"input": [[1, 2], "a"]}, "input", "invalid_value", "list of strings"),
    ({"input": [[FAKE_VOCAB]]}, "input", "invalid_token_id", "input: token id"),
    ({"input": [[1] * 5000]}, "input", "context_length_exceeded", "This model's maximum context length is 4096"),
    ({"input": ["a"] * 5}, "input", None, "at most 4"),
    ({"input": "a", "dimensions": 17}, "dimensions", None, "more than this model's"),
    ({"input": "a", "dimensions": 0}, "dimensions", "invalid_value", ""),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format", "invalid_value", ""),
    ({"input": "a", "truncate": True}, "truncate", "unknown_parameter", ""),
])
def test_bad_requests_are_openai_400s(fake, body, param, code, words):
    srv, backend = fake
    response = httpx.post(srv.base_url + "/v1/embeddings", json={"model": backend.model_id, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["code"] == code and words in error["message"], error
    assert not backend.embedded   # nothing reached the worker


def test_unknown_model_is_404_and_the_metrics_count_the_endpoint(fake):
    srv, backend = fake
    with pytest.raises(openai.NotFoundError):
        _openai(srv).embeddings.create(model="text-embedding-3-small", input="a")
    _openai(srv).embeddings.create(model=backend.model_id, input="a")
    metrics = httpx.get(srv.base_url + "/metrics").text
    assert 'switchyard_requests_total{class="none",endpoint="embeddings",engine="none",status="200"} 1.0' in metrics
    assert 'endpoint="embeddings",engine="none",status="404"} 1.0' in metrics


def test_ollama_client_embed_and_the_older_embeddings(fake):
    srv, backend = fake
    client = ollama.Client(host=srv.base_url)
    got = client.embed(model=backend.model_id + ":latest", input=["hello world", "zz"])
    assert got.model == backend.model_id and got.prompt_eval_count == 13 and got.total_duration > 0
    for vector, text in zip(got.embeddings, ["hello world", "zz"]):
        np.testing.assert_allclose(vector, unit(_fake_vector(backend, text)), rtol=1e-6)
    cut = client.embed(model=backend.model_id, input="abcdefgh", dimensions=8)
    np.testing.assert_allclose(cut.embeddings[0], unit(_fake_vector(backend, "abcdefgh")[:8]), rtol=1e-6)
    # the older call: one prompt, the vector as it is (not normalised), as Ollama returns it
    older = client.embeddings(model=backend.model_id, prompt="hello world")
    np.testing.assert_allclose(older.embedding, _fake_vector(backend, "hello world"), rtol=1e-6)
    # the load calls (the client's default input is ""): nothing runs
    seen = len(backend.embedded)
    assert client.embed(model=backend.model_id).embeddings == []
    assert client.embeddings(model=backend.model_id).embedding == []
    assert len(backend.embedded) == seen
    # errors in Ollama's shape: the client raises ResponseError with the message
    with pytest.raises(ollama.ResponseError) as refused:
        client.embed(model="nomic-embed-text", input="a")
    assert refused.value.status_code == 404 and "does not exist" in refused.value.error
    # Ollama's options change no embedding (no sampler runs), and are not read, as Ollama's embed reads none
    same = client.embed(model=backend.model_id, input="hello world", options={"mirostat": 2, "num_ctx": 8192})
    assert same.embeddings[0] == got.embeddings[0]


def test_embedding_waits_its_turn_and_keeps_the_timeout():
    """Queued as any request: a long input runs in pieces (the fake pauses every 4 tokens) and stops at the
    per-request timeout with OpenAI's 504; an engine failure is a 500, not a traceback."""
    backend = FakeBackend(step_seconds=0.05)
    config = GatewayConfig(request_timeout_seconds=0.3)
    with live_server(create_app(backend, config=config)) as srv:
        slow = httpx.post(srv.base_url + "/v1/embeddings", json={"input": "x" * 200})
        assert slow.status_code == 504 and slow.json()["error"]["code"] == "request_timeout", slow.text
        fast = httpx.post(srv.base_url + "/v1/embeddings", json={"input": "xyz"})
        assert fast.status_code == 200
    failing = FakeBackend(fail_after_steps=0)
    with live_server(create_app(failing)) as srv:
        broken = httpx.post(srv.base_url + "/api/embed", json={"input": "xyz"})
        assert broken.status_code == 500 and set(broken.json()) == {"error"}, broken.text


def test_embedding_runs_beside_a_stream():
    """A batch of documents does not hold up a running stream: both finish, the stream's tokens all arrive."""
    backend = FakeBackend(step_seconds=0.002)
    with live_server(create_app(backend, config=GatewayConfig(max_running=2))) as srv:
        client = _openai(srv)
        stream = client.chat.completions.create(model=backend.model_id, stream=True, max_tokens=10,
                                                messages=[{"role": "user", "content": "hi"}])
        got = client.embeddings.create(model=backend.model_id, input=["y" * 64] * 4)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert len(got.data) == 4 and text.split()[:10] == backend.reply.split()[:10]


# ---- the demo model: the vectors themselves


@pytest.fixture(scope="module")
def demo():
    with served_demo() as (srv, runtime):
        yield srv, runtime


def _mean_hidden_at_once(runtime, ids: list[int]) -> np.ndarray:
    from engines.target import forward_causal

    out = forward_causal(runtime.bundle, mx.array(ids, dtype=mx.uint32), runtime.bundle.make_cache())
    return np.array(out.hidden.astype(mx.float32).mean(axis=0))


def test_demo_vectors_are_the_targets_mean_hidden_state(demo):
    srv, runtime = demo
    texts = ["def add(a, b):\n    return a + b", "The weather in Lisbon is mild in spring."]
    got = _openai(srv).embeddings.create(model="default", input=texts)
    for data, text in zip(got.data, texts):
        ids = runtime.encode_prompt(text)
        np.testing.assert_allclose(data.embedding, unit(_mean_hidden_at_once(runtime, ids)), atol=1e-5)
    assert len(got.data[0].embedding) == runtime.embedding_size == runtime.bundle.hidden_size
    # one text embeds the same alone or among others, and differs from another text
    again = _openai(srv).embeddings.create(model="default", input=texts[1])
    np.testing.assert_allclose(again.data[0].embedding, got.data[1].embedding, atol=1e-6)
    assert float(np.dot(got.data[0].embedding, got.data[1].embedding)) < 0.999


def _run(steps) -> tuple[dict[int, np.ndarray], list]:
    """A Backend.embed generator run to its end: the vectors by index, and every item in order."""
    items = list(steps)
    vectors = {}
    for item in items:
        if isinstance(item, dict):
            vectors.update(item)
    return vectors, items


def test_demo_long_input_in_pieces_equals_one_forward(demo, monkeypatch):
    """An input longer than a prefill piece runs alone in pieces, pausing between them (the worker steps the
    others); its mean equals one forward over the whole input."""
    from contracts.engine import Pause

    srv, runtime = demo
    monkeypatch.setattr("engines.prefill.PREFILL_CHUNK", 32)   # pieces of 32 rows: the demo's 2,048 take a minute here
    monkeypatch.setattr("engines.embed.BATCH_ROWS", 32)
    ids = [(i * 37) % 1000 + 10 for i in range(100)]
    vectors, items = _run(runtime.embed([ids]))
    # three pauses between the four pieces, one after the forward, then the vector
    assert [type(item) for item in items] == [Pause] * 4 + [dict] and vectors[0].dtype == np.float32
    np.testing.assert_allclose(vectors[0], _mean_hidden_at_once(runtime, ids), rtol=1e-4, atol=1e-5)


def test_demo_short_texts_share_a_forward_and_embed_as_alone(demo, monkeypatch):
    """On a GPU short texts run right-padded in one forward (shortest first, within BATCH_ROWS padded rows); each
    comes back as its own forward gives it, under its own index, the padding read nowhere. The CPU serves each
    text alone (a forward there costs its rows: padding is loss)."""
    from contracts.engine import Pause
    from engines.embed import _batches

    srv, runtime = demo
    monkeypatch.setattr("engines.embed.BATCH_ROWS", 2048)   # as on a GPU (the CPU serves each text alone)
    texts = ["Hello.", "def f(x):\n    return x * 2", "A longer sentence about the weather in the hills today.",
             "{\"a\": 1}", "ok"]
    inputs = [runtime.encode_prompt(t) for t in texts]
    vectors, items = _run(runtime.embed(inputs))
    assert [type(item) for item in items] == [Pause, dict]   # one forward for all five
    assert sorted(vectors) == list(range(len(texts)))
    for index, ids in enumerate(inputs):
        np.testing.assert_allclose(vectors[index], _mean_hidden_at_once(runtime, ids), rtol=1e-4, atol=1e-5)
    # grouping: ascending length, each group's texts x longest within the budget, a text over it alone
    lengths = [3, 10, 1, 4, 40, 2]
    groups = _batches([[7] * n for n in lengths], rows=12)
    assert groups == [[2, 5, 0], [3], [1], [4]]
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    from engines.embed import shared_rows
    from engines.prefill import PREFILL_CHUNK

    monkeypatch.setattr("engines.embed.BATCH_ROWS", None)   # the default: shared on a GPU only
    assert shared_rows() == (PREFILL_CHUNK if mx.default_device().type == mx.gpu else 1)
    monkeypatch.setattr("engines.embed.BATCH_ROWS", 1)   # as on the CPU: one forward each, the same vectors
    alone, items = _run(runtime.embed(inputs))
    assert [type(item) for item in items] == [Pause, dict] * len(texts)
    for index in range(len(texts)):
        np.testing.assert_allclose(alone[index], vectors[index], rtol=1e-4, atol=1e-5)


def test_demo_over_the_context_ollama_truncates_or_refuses(demo, monkeypatch):
    srv, runtime = demo
    limit = 64   # the demo's own 8,192 would take minutes of CPU prefill here
    monkeypatch.setitem(runtime.bundle.text_config, "max_position_embeddings", limit)
    assert runtime.context_length == limit
    text = " word" * (limit + 50)
    assert len(runtime.encode_prompt(text)) > limit
    cut = httpx.post(srv.base_url + "/api/embed", json={"input": text}).json()
    assert cut["prompt_eval_count"] == limit and len(cut["embeddings"][0]) == runtime.embedding_size
    # cut to the first `limit` tokens, as Ollama truncates
    head = runtime.encode_prompt(text)[:limit]
    np.testing.assert_allclose(cut["embeddings"][0], unit(_mean_hidden_at_once(runtime, head)), atol=1e-5)
    refused = httpx.post(srv.base_url + "/api/embed", json={"input": text, "truncate": False})
    assert refused.status_code == 400 and "maximum context length" in refused.json()["error"]
    openai_refused = httpx.post(srv.base_url + "/v1/embeddings", json={"input": text})
    assert openai_refused.json()["error"]["code"] == "context_length_exceeded"


def test_embeddings_need_the_api_key_in_each_apis_error_shape():
    backend = FakeBackend()
    with live_server(create_app(backend, config=GatewayConfig(api_keys=("sk-test",)))) as srv:
        refused = httpx.post(srv.base_url + "/v1/embeddings", json={"input": "a"})
        assert refused.status_code == 401 and refused.json()["error"]["type"], refused.text
        with pytest.raises(ollama.ResponseError) as ollama_refused:
            ollama.Client(host=srv.base_url).embed(model=backend.model_id, input="a")
        assert ollama_refused.value.status_code == 401
        keyed = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="sk-test", max_retries=0)
        assert len(keyed.embeddings.create(model=backend.model_id, input=["a", "b"]).data) == 2
    assert not backend.embedded[:-2]   # only the keyed request reached the worker
