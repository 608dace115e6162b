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
    text (token ids decoded) now leads each choice, in a stream as the choice's first chunk (with logprobs:
    test_echo_with_logprobs_scores_the_prompt)."""
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
    outside = _post(srv, "/v1/completions", {"prompt": [10**6], "max_tokens": 1, "echo": True})
    assert outside.status_code == 400 and outside.json()["error"]["code"] == "invalid_token_id", outside.text


def test_suffix_fills_in_the_middle_where_the_tokenizer_has_fim_tokens(srv, tiny_qwen_chat_target, demo_tokenizer):
    """OpenAI's /v1/completions `suffix` (insert mode; code editors' fill-in-the-middle completions send it)
    was a 400 on every model. Where the tokenizer has fill-in-the-middle tokens (Qwen's <|fim_prefix|>,
    <|fim_suffix|>, <|fim_middle|>) the prompt is now <|fim_prefix|>prompt<|fim_suffix|>suffix<|fim_middle|>,
    after which the model writes the gap; where it has none (the demo's and the test checkpoints' tokenizers)
    a suffix is a 400 that says why, and /openapi.json takes a suffix only where it is served."""
    from mlx_lm.utils import load_tokenizer

    from engines.runtime import load_runtime
    from engines.text import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, fill_in_middle, fim_token_ids
    from gateway.http.app import create_app
    from gateway.http.openapi import build_openapi
    from tests.fakes import live_server

    # the gateway: a backend without FIM tokens refuses, one with them gets the suffix
    refused = _post(srv, "/v1/completions", {"prompt": "def f(", "suffix": "\n    return x\n", "max_tokens": 1})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "suffix", refused.text
    assert "fill-in-the-middle" in refused.json()["error"]["message"]
    assert _post(srv, "/v1/completions", {"prompt": "hi", "suffix": "", "max_tokens": 1}).status_code == 200
    srv.backend.fills_in_middle = True
    srv.backend.reply = PROSE
    reply = _openai(srv).completions.create(model="default", prompt="def f(", suffix=")", max_tokens=2)
    assert reply.choices[0].text == "The quick"
    assert srv.backend.encoded[-1] == "<|fim_prefix|>def f(<|fim_suffix|>)<|fim_middle|>"
    suffix_schema = build_openapi()["components"]["schemas"]["CompletionRequest"]["properties"]["suffix"]
    assert suffix_schema == {"enum": [None, ""]}
    assert "enum" not in str(build_openapi(fills_in_middle=True)["components"]["schemas"]["CompletionRequest"]
                             ["properties"]["suffix"])

    # the runtime: a Qwen tokenizer with the tokens builds the prompt from them; the test checkpoint's has none
    tokenizer = load_tokenizer(tiny_qwen_chat_target)
    tokenizer.add_special_tokens({"additional_special_tokens": [FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE]})
    start, middle, end = (tokenizer.convert_tokens_to_ids(t) for t in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE))
    assert fill_in_middle(tokenizer, [5, 6], [7]) == [start, 5, 6, middle, 7, end]
    assert fim_token_ids(demo_tokenizer) is None   # the demo model was trained without them
    runtime = load_runtime(str(tiny_qwen_chat_target))
    assert not runtime.fills_in_middle
    assert runtime.prompt_text(runtime.encode_prompt("the cat")) == "the cat"   # echo's text of token ids
    with live_server(create_app(runtime)) as server:
        refused = _post(server, "/v1/completions", {"prompt": "def f(", "suffix": ")", "max_tokens": 1})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "suffix", refused.text
        assert "<|fim_prefix|>" in refused.json()["error"]["message"]
        echoed = _openai(server).completions.create(model="default", prompt="the cat", max_tokens=2, echo=True)
        assert echoed.choices[0].text.startswith("the cat")


def test_continuous_usage_stats_puts_the_running_usage_in_every_chunk(srv):
    """vLLM's `stream_options.continuous_usage_stats` (some OpenAI-compatible clients send it beside
    include_usage, to show tokens as they stream) was an "Unrecognized request argument" 400 on chat and
    completions. It is accepted (true, false, null); true with include_usage puts the usage so far in every
    chunk, as vLLM does, the completion tokens counting up; the last, choice-less chunk carries the total."""
    srv.backend.reply = PROSE
    for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/completions", {"prompt": "hi"})):
        streamed = _post(srv, path, {**body, "max_tokens": 3, "stream": True,
                                     "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
        assert streamed.status_code == 200, streamed.text
        chunks = _chunks(streamed)
        assert all(chunk.get("usage") for chunk in chunks), (path, chunks)
        counts = [chunk["usage"]["completion_tokens"] for chunk in chunks]
        assert counts == sorted(counts) and counts[-1] == 3 and counts[0] < 3, (path, counts)
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 3 + chunks[-1]["usage"][
            "prompt_tokens"]
        for options in ({"include_usage": True, "continuous_usage_stats": False}, {"continuous_usage_stats": None},
                        {"continuous_usage_stats": True}):   # vLLM: only beside include_usage
            quiet = _post(srv, path, {**body, "max_tokens": 2, "stream": True, "stream_options": options})
            assert quiet.status_code == 200, (options, quiet.text)
            assert not any(chunk.get("usage") for chunk in _chunks(quiet) if chunk["choices"]), options
    client_chunks = list(_openai(srv).chat.completions.create(
        model="default", messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}))   # type: ignore[typeddict-unknown-key]
    assert client_chunks[-1].usage.completion_tokens == 2


def test_best_of_against_n_is_a_documented_semantic_400(srv):
    """best_of below n, or above it in a stream, compares two fields, which JSON Schema cannot state:
    /openapi.json allowed such bodies and the server answered a 400 with a generic code, so a client generated
    from the schema (and the schema fuzzer) met an undocumented rejection. Both are now the documented
    conflicting_constraints 400, named in the operation's description with the other such rules."""
    from gateway.http.openapi import SEMANTIC_RULES

    for body in ({"best_of": 1, "n": 2}, {"best_of": 3, "n": 1, "stream": True}):
        refused = _post(srv, "/v1/completions", {"prompt": "hi", "max_tokens": 1, **body})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "conflicting_constraints", refused.text
    assert "best_of below n" in SEMANTIC_RULES


def test_routes_of_other_apis_say_what_to_use_instead(srv):
    """Open WebUI (and other Ollama clients) with this server added as an Ollama connection probe GET
    /api/tags and /api/version, and RAG features POST /v1/embeddings: each was a bare 404 "Unknown route",
    which reads as a wrong URL. The 404 now says which API the route belongs to is not served and what to
    connect to instead (an OpenAI-compatible connection at /v1); other unknown routes are as before."""
    # (Ollama's chat, generate, tags, show, ps and version are served now: tests/test_ollama_api.py; and
    # embeddings, OpenAI's and Ollama's: tests/test_embeddings.py)
    for method, path, words in (("POST", "/api/pull", "Ollama's /api/chat"),
                                ("POST", "/api/delete", "not Ollama's model management")):
        response = httpx.request(method, srv.base_url + path, json={"model": "default"})
        assert response.status_code == 404, (path, response.text)
        error = response.json()["error"]
        if path.startswith("/api/"):   # Ollama's routes answer in Ollama's error shape, the message alone
            assert words in error, (path, error)
        else:
            assert error["code"] == "unknown_url" and words in error["message"], (path, error)
    plain = httpx.get(srv.base_url + "/v2/nothing").json()["error"]["message"]
    assert plain == "Unknown route: GET /v2/nothing"


def test_echo_with_logprobs_scores_the_prompt(srv, tiny_qwen_chat_target):
    """lm-eval's loglikelihood tasks (local-completions) send echo: true with logprobs and read the prompt's
    own token log-probabilities back; that was a 400. The prompt is now scored (Backend.prompt_logprobs: one
    more forward over it on every engine's target) and its tokens lead each choice's logprobs, the first with
    null (nothing precedes it), as OpenAI's, text offsets running on into the generated tokens."""
    from engines.runtime import load_runtime
    from gateway.http.app import create_app
    from tests.fakes import live_server

    srv.backend.reply = PROSE
    reply = _openai(srv).completions.create(model="default", prompt="abc", max_tokens=2, echo=True, logprobs=1)
    logprobs = reply.choices[0].logprobs
    assert reply.choices[0].text == "abcThe quick"
    assert logprobs.tokens[:3] == ["a", "b", "c"] and logprobs.token_logprobs[:3] == [None, -1.0, -1.0]
    assert logprobs.top_logprobs[0] is None and logprobs.top_logprobs[1] == {"b": -1.0}
    assert logprobs.text_offset == [0, 1, 2]   # (the fake gives its generated tokens none)
    assert srv.backend.scored[-1] == [ord(c) for c in "abc"]
    streamed = _post(srv, "/v1/completions", {"prompt": "ab", "max_tokens": 1, "echo": True, "logprobs": 0,
                                              "stream": True})
    first, second = (chunk["choices"][0] for chunk in _chunks(streamed)[:2])
    assert first["text"] == "ab" and first["logprobs"]["token_logprobs"] == [None, -1.0]
    assert second["text"] == "The"
    before = len(srv.backend.scored)
    _openai(srv).completions.create(model="default", prompt="abc", max_tokens=1, echo=True)
    _openai(srv).completions.create(model="default", prompt="abc", max_tokens=1, logprobs=1)
    assert len(srv.backend.scored) == before   # scored only for echo with logprobs

    runtime = load_runtime(str(tiny_qwen_chat_target))
    ids = runtime.encode_prompt("the cat sat on the mat")
    with live_server(create_app(runtime)) as server:
        for engine in runtime.engine_names:
            done = _openai(server).completions.create(model="default", prompt="the cat sat on the mat", max_tokens=2,
                                                      temperature=0, echo=True, logprobs=2,
                                                      extra_body={"engine": engine}).choices[0]
            assert done.text.startswith("the cat sat on the mat"), engine
            assert len(done.logprobs.tokens) == len(ids) + 2 and done.logprobs.token_logprobs[0] is None, engine
            assert all(lp <= 0 for lp in done.logprobs.token_logprobs[1:]), engine
            assert "".join(done.logprobs.tokens[:len(ids)]) == "the cat sat on the mat", engine
            # the generated tokens' offsets run on from the end of the echoed prompt
            assert done.logprobs.text_offset[len(ids)] == len("the cat sat on the mat"), engine
    # the scores are the target's: the same prompt scored whole, as the next-token distribution after each prefix
    import mlx.core as mx
    scored = runtime.prompt_logprobs(ids, 0).scored
    logits = runtime.bundle.model(mx.array(ids[:3], dtype=mx.uint32)[None], cache=runtime.bundle.make_cache())[0, -1]
    expected = (logits - mx.logsumexp(logits)).tolist()[ids[3]]
    assert abs(scored[2].logprob - expected) < 1e-3


def test_max_tokens_zero_with_echo_reads_the_prompt_back_scored(srv):
    """OpenAI's legacy scoring call (lm-eval 0.3's gpt3 model, and harnesses built on it) sends max_tokens 0
    with echo and logprobs: the prompt's log-probabilities, nothing generated. max_tokens 0 was a 400
    ("greater than or equal to 1"). It is now taken with echo: no generation runs, each choice is the prompt
    read back (scored with logprobs), finish_reason "length"; without echo it is a 400 that says so."""
    before = len(srv.backend.calls)
    reply = _openai(srv).completions.create(model="default", prompt=["abc", "de"], max_tokens=0, echo=True,
                                            logprobs=0)
    assert len(srv.backend.calls) == before   # nothing generated
    assert [c.text for c in reply.choices] == ["abc", "de"]
    assert [c.finish_reason for c in reply.choices] == ["length", "length"]
    assert reply.choices[0].logprobs.token_logprobs == [None, -1.0, -1.0]
    assert reply.usage.completion_tokens == 0 and reply.usage.prompt_tokens == 5
    streamed = _post(srv, "/v1/completions", {"prompt": "ab", "max_tokens": 0, "echo": True, "stream": True})
    assert [c["choices"][0]["text"] for c in _chunks(streamed)] == ["ab", ""]
    assert _chunks(streamed)[-1]["choices"][0]["finish_reason"] == "length"
    refused = _post(srv, "/v1/completions", {"prompt": "ab", "max_tokens": 0})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "max_tokens", refused.text
    assert _post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                               "max_tokens": 0}).status_code == 400
