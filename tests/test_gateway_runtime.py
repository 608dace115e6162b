"""The gateway over the real runtime (tiny generated Qwen3.5 checkpoint): same greedy output as mlx-lm."""

from __future__ import annotations

import httpx
import openai
import pytest

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Write a short line about rivers."}]
MAX_TOKENS = 24


def _mlx_lm_greedy(model_dir, messages, prompt: str | None = None, max_tokens: int = MAX_TOKENS):
    """mlx-lm's own answer: (prompt ids, text from mlx_lm.generate, completion token ids without EOS, finish)."""
    from mlx_lm import generate, load, stream_generate
    from mlx_lm.sample_utils import make_sampler

    model, tokenizer = load(str(model_dir))
    if prompt is None:
        ids = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    else:
        ids = list(tokenizer.encode(prompt, add_special_tokens=False))
    text = generate(model, tokenizer, prompt=ids, max_tokens=max_tokens, sampler=make_sampler(temp=0.0))
    tokens, finish = [], None
    for response in stream_generate(model, tokenizer, prompt=ids, max_tokens=max_tokens, sampler=make_sampler(temp=0.0)):
        finish = response.finish_reason
        if finish != "stop":
            tokens.append(response.token)
    return ids, text, tokens, finish


@pytest.fixture(scope="module")
def reference(tiny_target):
    return tiny_target, _mlx_lm_greedy(tiny_target, MESSAGES), _mlx_lm_greedy(tiny_target, None, prompt="The river")


@pytest.fixture(scope="module")
def served(reference, tiny_drafter):
    from engines.runtime import load_runtime
    from gateway.http.app import create_app
    from tests.fakes import live_server

    runtime = load_runtime(reference[0], draft_dir=tiny_drafter)
    with live_server(create_app(runtime)) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
        yield server, client, runtime


def test_real_runtime_serves_the_tiny_checkpoint(served):
    server, client, runtime = served
    assert set(runtime.engine_names) == {"raw", "mtp", "ddtree"}
    assert [m.id for m in client.models.list().data] == [runtime.model_id]
    assert httpx.get(server.base_url + "/health").status_code == 200


def test_chat_greedy_equals_mlx_lm_generate(served, reference):
    server, client, runtime = served
    _, (prompt_ids, text, tokens, finish), _ = reference
    for engine in runtime.engine_names:  # speculative engines are lossless: same greedy text
        raw = client.chat.completions.with_raw_response.create(
            model="default", messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0, extra_body={"engine": engine}
        )
        completion = raw.parse()
        assert raw.headers["x-switchyard-engine"] == engine
        assert completion.choices[0].message.content == text, engine
        assert completion.usage.prompt_tokens == len(prompt_ids)  # the chat template was applied
        assert completion.usage.completion_tokens == len(tokens)
        assert completion.choices[0].finish_reason == finish


def test_completion_greedy_equals_mlx_lm_generate_streaming(served, reference):
    server, client, runtime = served
    _, _, (prompt_ids, text, tokens, finish) = reference
    # mlx-lm's text writes the special tokens this random model emits (<|im_start|>); the server leaves them out
    # unless skip_special_tokens is false (vLLM's default, true)
    chunks = list(client.completions.create(model="default", prompt="The river", max_tokens=MAX_TOKENS, temperature=0,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"skip_special_tokens": False}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    plain = client.completions.create(model="default", prompt="The river", max_tokens=MAX_TOKENS, temperature=0)
    assert plain.choices[0].text == text.replace("<|im_start|>", "").replace("<|im_end|>", "")
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == finish
    assert chunks[-1].usage.prompt_tokens == len(prompt_ids)
    assert chunks[-1].usage.completion_tokens == len(tokens)


def test_max_tokens_finishes_with_length(served, reference):
    server, client, runtime = served
    _, (prompt_ids, text, tokens, finish), _ = reference
    assert len(tokens) >= 3, "the tiny model hit EOS within 3 tokens; pick another prompt"
    completion = client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=3, temperature=0)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 3
    assert text.startswith(completion.choices[0].message.content)


def test_stop_sequence_cuts_the_greedy_text(served, reference):
    server, client, runtime = served
    _, (prompt_ids, text, tokens, finish), _ = reference
    # a stop string taken from the middle of the reference output (clean text, no partial UTF-8)
    candidates = [text[i:i + 2] for i in range(2, len(text) - 2) if text[i:i + 2].isprintable() and "\ufffd" not in text[i:i + 2]
                  and text[i:i + 2].strip()]
    assert candidates, f"no usable stop string in {text!r}"
    stop = candidates[0]
    expected = text[: text.find(stop)]
    for stream in (False, True):
        if stream:
            chunks = list(client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=MAX_TOKENS,
                                                         temperature=0, stop=[stop], stream=True))
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            reason = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        else:
            completion = client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=MAX_TOKENS,
                                                        temperature=0, stop=stop)
            content, reason = completion.choices[0].message.content, completion.choices[0].finish_reason
        assert content == expected and stop not in content
        assert reason == "stop"


def test_context_overflow_is_a_400(served):
    server, client, runtime = served
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=runtime.context_length)
    assert err.value.body["code"] == "context_length_exceeded"


def test_lone_surrogate_is_a_400_not_a_500(served):
    """A lone UTF-16 surrogate escape (a JS string cut mid-emoji) is valid JSON syntax but not
    Unicode: the tokenizer cannot encode it. The client gets a 400 naming the field, on every endpoint."""
    server, client, runtime = served
    bodies = [("/v1/chat/completions", '{"messages": [{"role": "user", "content": "cut \\ud83d"}], "max_tokens": 2}'),
              ("/v1/completions", '{"prompt": "cut \\ud83d", "max_tokens": 2}'),
              ("/v1/responses", '{"input": "cut \\ud83d", "max_output_tokens": 2}'),
              ("/v1/messages", '{"model": "default", "max_tokens": 2, "messages": [{"role": "user", "content": '
                               '"\\ud83d"}]}'),
              ("/v1/messages/count_tokens", '{"model": "default", "messages": [{"role": "user", "content": "\\ud83d"}]}')]
    for path, body in bodies:
        response = httpx.post(server.base_url + path, content=body.encode(),
                              headers={"content-type": "application/json"})
        assert response.status_code == 400, (path, response.text)
        assert "surrogate" in response.json()["error"]["message"]
    assert httpx.get(server.base_url + "/health").status_code == 200


def test_concurrent_requests_each_get_their_own_greedy_answer(served):
    """Requests queued behind each other on the one worker do not mix state: same text as alone."""
    import threading

    server, client, runtime = served
    prompts = ["The river", "def add(a, b):", '{"name": "x"', "Once upon a time"]
    alone = [client.completions.create(model="default", prompt=p, max_tokens=8, temperature=0).choices[0].text
             for p in prompts]
    together: dict[int, str] = {}

    def ask(i: int) -> None:
        stream = client.completions.create(model="default", prompt=prompts[i], max_tokens=8, temperature=0, stream=True,
                                           extra_body={"engine": runtime.engine_names[i % len(runtime.engine_names)]})
        together[i] = "".join(c.choices[0].text for c in stream if c.choices)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [together.get(i) for i in range(len(prompts))] == alone


def test_every_engine_streams_the_greedy_text(served, reference):
    """`engine: mtp` / `ddtree` (and the header form) stream through the openai client, SSE, with
    the same greedy text as raw and mlx-lm."""
    server, client, runtime = served
    _, (prompt_ids, text, tokens, finish), _ = reference
    assert {"mtp", "ddtree"} <= set(runtime.engine_names)
    for engine in runtime.engine_names:
        with client.chat.completions.with_streaming_response.create(
            model="default", messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0, stream=True,
            extra_headers={"X-Switchyard-Engine": engine},
        ) as response:
            assert response.headers["x-switchyard-engine"] == engine
            assert response.headers["x-switchyard-route-reason"] == "forced"
            chunks = list(response.parse())
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text, engine
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == finish


def test_a_batch_of_text_and_token_id_prompts_equals_each_alone(served, reference):
    """Several prompts in one completion (LangChain's batch): each choice is its prompt's greedy text, token-id
    prompts run from those ids (the same text as the string they encode), an id past the vocabulary is a 400."""
    server, client, runtime = served
    _, _, (prompt_ids, text, tokens, finish) = reference
    for prompts in (["The river", "The river"], [prompt_ids, prompt_ids]):
        batch = client.completions.create(model="default", prompt=prompts, max_tokens=MAX_TOKENS, temperature=0,
                                          extra_body={"skip_special_tokens": False})   # as mlx-lm writes the text
        assert [c.index for c in batch.choices] == [0, 1]
        assert [c.text for c in batch.choices] == [text, text]
        assert batch.usage.prompt_tokens == 2 * len(prompt_ids)
    outside = httpx.post(server.base_url + "/v1/completions",
                         json={"prompt": [[1, 2], [runtime.bundle.vocab_size]], "max_tokens": 1})
    assert outside.status_code == 400 and outside.json()["error"]["code"] == "invalid_token_id", outside.text
