"""Fields real clients send beside OpenAI's (vLLM's sampling extras, as Open WebUI, LibreChat, SillyTavern and
litellm pass them through), end to end on the embedded demo model through the openai SDK: each one does
what vLLM does with it, under every engine (speculation stays lossless: greedy engines agree)."""

from __future__ import annotations

import openai
import pytest

from gateway.http.app import create_app
from tests.fakes import live_server, served_demo

# the demo model's greedy reply to this ends (EOS) after 42 tokens
SHORT = [{"role": "user", "content": "Say yes."}]


@pytest.fixture(scope="module")
def demo():
    with served_demo() as (srv, runtime):
        yield openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0), runtime


def _chat(client, engine: str, **extra):
    return client.chat.completions.create(model="default", messages=SHORT, temperature=0, max_tokens=80,
                                          extra_body={"engine": engine, **extra})


def test_min_tokens_bans_the_end_until_reached_under_every_engine(demo):
    client, runtime = demo
    plain = _chat(client, "raw")
    assert plain.choices[0].finish_reason == "stop"
    ended = plain.usage.completion_tokens
    assert ended < 60, "the plain reply must end early, or this test proves nothing"
    replies = {}
    for engine in runtime.engine_names:
        reply = _chat(client, engine, min_tokens=60)
        assert reply.usage.completion_tokens >= 60, (engine, reply.usage.completion_tokens)
        assert reply.choices[0].message.content.startswith(plain.choices[0].message.content.rstrip()[:40])
        replies[engine] = reply.choices[0].message.content
    assert len(set(replies.values())) == 1, replies   # the ban is in the target's logits: lossless
    # below the point where it ends anyway, min_tokens changes nothing
    assert _chat(client, "mtp", min_tokens=ended - 5).choices[0].message.content == plain.choices[0].message.content
    completion = client.completions.create(model="default", prompt="Say yes.", temperature=0, max_tokens=30,
                                           extra_body={"min_tokens": 30})
    assert completion.usage.completion_tokens == 30 and completion.choices[0].finish_reason == "length"


def test_min_tokens_over_max_tokens_is_a_400(demo):
    client, _ = demo
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="default", messages=SHORT, max_tokens=5, extra_body={"min_tokens": 6})
    assert caught.value.body["param"] == "min_tokens"


def test_stop_token_ids_end_the_reply_as_eos_does(demo):
    client, runtime = demo
    plain = _chat(client, "raw").choices[0].message.content
    tokenizer = runtime.bundle.tokenizer
    ids = list(tokenizer.encode(plain, add_special_tokens=False))
    stop = ids[6]
    assert stop not in ids[:6]
    for engine in runtime.engine_names:
        reply = _chat(client, engine, stop_token_ids=[stop])
        assert reply.choices[0].finish_reason == "stop", engine
        assert reply.usage.completion_tokens == 6, engine
        assert reply.choices[0].message.content == tokenizer.decode(ids[:6]), engine   # the stop token is not text
    # JSON Schema's integer admits 6.0 (the fuzz test sends such ids): read as the whole number, as every int field
    assert _chat(client, "raw", stop_token_ids=[float(stop)]).usage.completion_tokens == 6
    with pytest.raises(openai.BadRequestError) as caught:
        _chat(client, "raw", stop_token_ids=[10**6])
    assert caught.value.body["param"] == "stop_token_ids"


def test_ignore_eos_runs_to_max_tokens_under_every_engine(demo):
    client, runtime = demo
    assert _chat(client, "raw").choices[0].finish_reason == "stop"
    replies = {}
    for engine in runtime.engine_names:
        reply = _chat(client, engine, ignore_eos=True)
        assert reply.choices[0].finish_reason == "length", engine
        assert reply.usage.completion_tokens == 80, engine
        replies[engine] = reply.choices[0].message.content
    assert len(set(replies.values())) == 1, replies
    completion = client.completions.create(model="default", prompt="Say yes.", temperature=0, max_tokens=40,
                                           extra_body={"ignore_eos": True})
    assert completion.usage.completion_tokens == 40


def test_skip_special_tokens_keeps_them_out_of_the_text_by_default(demo):
    """vLLM's skip_special_tokens (default true, as SillyTavern sends it): the EOS ignore_eos runs past is a
    token of the reply (counted) but not text; false writes it; spaces_between_special_tokens is accepted."""
    client, _ = demo
    specials = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")
    default = _chat(client, "raw", ignore_eos=True).choices[0].message.content
    skipped = _chat(client, "raw", ignore_eos=True, skip_special_tokens=True,
                    spaces_between_special_tokens=True).choices[0].message.content
    kept = _chat(client, "raw", ignore_eos=True, skip_special_tokens=False).choices[0].message.content
    assert default == skipped and not any(s in default for s in specials)
    assert any(s in kept for s in specials) and kept != default
    for s in specials:
        kept = kept.replace(s, "")
    assert kept == default


# every extra field the clients named in the module docstring send beside OpenAI's, at values they send
EXTRAS = {"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "presence_penalty": 0.1, "frequency_penalty": 0.1,
          "seed": 5, "user": "someone", "min_tokens": 1, "stop_token_ids": [3], "ignore_eos": False,
          "skip_special_tokens": True, "spaces_between_special_tokens": True, "use_beam_search": False,
          "length_penalty": 1.0, "typical_p": 1.0, "include_stop_str_in_output": False}
CHAT_EXTRAS = {"include_reasoning": True, "add_generation_prompt": True, "continue_final_message": False,
               "chat_template_kwargs": {"enable_thinking": False}}


def test_every_client_extra_is_accepted_and_the_unsupported_name_themselves():
    """As litellm / LangChain's VLLMOpenAI / SillyTavern send them (the neutral values of what is not run here
    included): each request is served; a value that asks for what is not run here is a 400 naming the field."""
    from tests.fakes import FakeBackend

    with live_server(create_app(FakeBackend())) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        chat = client.chat.completions.create(model="default", messages=SHORT, max_tokens=4,
                                              extra_body={**EXTRAS, **CHAT_EXTRAS})
        assert chat.choices[0].message.content
        text = client.completions.create(model="default", prompt="Say yes.", max_tokens=4, extra_body=EXTRAS)
        assert text.choices[0].text
        for name, value in (("use_beam_search", True), ("length_penalty", 0.8), ("typical_p", 0.9),
                            ("include_stop_str_in_output", True)):
            with pytest.raises(openai.BadRequestError) as caught:
                client.chat.completions.create(model="default", messages=SHORT, max_tokens=4, extra_body={name: value})
            assert caught.value.body["param"] == name and "not supported" in caught.value.body["message"]


def test_vllm_structured_output_fields_constrain_every_engine(demo):
    """vLLM's guided_choice / guided_regex / guided_json / guided_grammar and structured_outputs (as LangChain,
    outlines-style clients and litellm pass them): decoded by the grammar machinery response_format uses, so
    the reply matches under every engine and greedy engines agree."""
    import json
    import re

    client, runtime = demo
    choices = {}
    for engine in runtime.engine_names:
        reply = _chat(client, engine, guided_choice=["yes", "no", "maybe"])
        assert reply.choices[0].message.content in ("yes", "no", "maybe") and reply.choices[0].finish_reason == "stop"
        choices[engine] = reply.choices[0].message.content
    assert len(set(choices.values())) == 1, choices
    digits = _chat(client, "mtp", structured_outputs={"regex": "[0-9]{3}"}).choices[0].message.content
    assert re.fullmatch("[0-9]{3}", digits), digits
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    assert isinstance(json.loads(_chat(client, "ddtree", guided_json=schema).choices[0].message.content)["ok"], bool)
    grammar = 'root ::= "A" | "B"'
    assert _chat(client, "raw", guided_grammar=grammar).choices[0].message.content in ("A", "B")
    text = client.completions.create(model="default", prompt="Say yes.", temperature=0, max_tokens=10,
                                     extra_body={"guided_regex": "(yes|no)!"})
    assert text.choices[0].text in ("yes!", "no!")
    for extra, param in (({"guided_regex": "(yes"}, "guided_regex"),
                         ({"guided_choice": ["a"], "guided_regex": "a"}, "guided_choice")):
        with pytest.raises(openai.BadRequestError) as caught:
            _chat(client, "raw", **extra)
        assert caught.value.body["param"] == param


def test_truncate_prompt_tokens_reads_only_the_prompts_last_tokens(demo):
    """vLLM's truncate_prompt_tokens (RAG clients cap a long retrieved context with it): the prompt keeps its
    last k tokens, as usage reports; the reply is the one to those k tokens sent as the prompt, under every
    engine; -1 keeps what fits the context; with echo (the prompt read back as sent) it is a 400."""
    import httpx

    client, runtime = demo
    root = str(client.base_url).rstrip("/").removesuffix("/v1")
    text = "Notes on the weather in Oslo, Bergen and Tromsø for the week ahead. " * 4 + "Summarise the notes."
    ids = httpx.post(root + "/tokenize", json={"prompt": text}).json()["tokens"]
    k = 20
    assert len(ids) > 2 * k
    expected = client.completions.create(model="default", prompt=ids[-k:], temperature=0, max_tokens=24,
                                         extra_body={"engine": "raw"})
    for engine in runtime.engine_names:
        cut = client.completions.create(model="default", prompt=text, temperature=0, max_tokens=24,
                                        extra_body={"engine": engine, "truncate_prompt_tokens": k})
        assert cut.usage.prompt_tokens == k and cut.choices[0].text == expected.choices[0].text, engine
    whole = client.completions.create(model="default", prompt=text, temperature=0, max_tokens=4,
                                      extra_body={"truncate_prompt_tokens": -1})
    assert whole.usage.prompt_tokens == len(ids)
    conversation = [{"role": "user", "content": text}]
    rendered = httpx.post(root + "/tokenize", json={"messages": conversation}).json()["tokens"]
    chat = client.chat.completions.create(model="default", messages=conversation, temperature=0, max_tokens=24,
                                          extra_body={"truncate_prompt_tokens": k})
    assert chat.usage.prompt_tokens == k < len(rendered)
    raw_end = client.completions.create(model="default", prompt=rendered[-k:], temperature=0, max_tokens=24)
    assert chat.usage.completion_tokens == raw_end.usage.completion_tokens
    for body in ({"truncate_prompt_tokens": 0}, {"truncate_prompt_tokens": -2},
                 {"truncate_prompt_tokens": 5, "echo": True}):
        with pytest.raises(openai.BadRequestError) as caught:
            client.completions.create(model="default", prompt=text, max_tokens=4, extra_body=body)
        assert caught.value.body["param"] == "truncate_prompt_tokens", caught.value.body


def test_allowed_token_ids_and_bad_words_under_every_engine(demo):
    """vLLM's allowed_token_ids (classification-style replies: only these tokens) and bad_words (never these
    words, as vLLM tokenizes them), through the openai SDK: under every engine the greedy reply is the same and
    keeps to them; an id past the vocabulary is a 400 naming the field."""
    client, runtime = demo
    tokenizer = runtime.bundle.tokenizer
    plain = _chat(client, "raw").choices[0].message.content
    ids = list(tokenizer.encode(plain, add_special_tokens=False))
    allowed = sorted(set(ids[:8]))
    pieces = {tokenizer.decode([t]) for t in allowed}
    texts = set()
    for engine in runtime.engine_names:
        reply = client.completions.create(model="default", prompt="Say yes.", temperature=0, max_tokens=12, logprobs=0,
                                          extra_body={"engine": engine, "allowed_token_ids": allowed})
        assert set(reply.choices[0].logprobs.tokens) <= pieces, engine
        texts.add(reply.choices[0].text)
    assert len(texts) == 1
    word = next(w for w in plain.split() if w.isalpha() and len(w) > 3)
    banned = [tuple(tokenizer.encode(w, add_special_tokens=False)) for w in (word, " " + word)]
    replies = set()
    for engine in runtime.engine_names:
        reply = _chat(client, engine, bad_words=[word]).choices[0].message.content
        out = list(tokenizer.encode(reply, add_special_tokens=False))
        assert not any(tuple(out[i:i + len(b)]) == b for b in banned for i in range(len(out))), (engine, word)
        replies.add(reply)
    assert len(replies) == 1 and plain not in replies
    for body in ({"allowed_token_ids": [10**7]}, {"allowed_token_ids": []}):
        with pytest.raises(openai.BadRequestError) as caught:
            _chat(client, "raw", **body)
        assert caught.value.body["param"] == "allowed_token_ids", caught.value.body


def test_stop_strings_wait_for_min_tokens_as_in_vllm(demo):
    """vLLM looks for no stop string before min_tokens: a stop string the reply writes early does not end it
    then; the first one after that does, under every engine alike."""
    client, runtime = demo
    plain = _chat(client, "raw").choices[0].message.content
    stop = next(w for w in plain.split()[1:] if w.isalpha() and len(w) > 2)
    cut = _chat(client, "raw", stop=[stop])
    assert cut.choices[0].finish_reason == "stop" and cut.usage.completion_tokens < 30, "must stop early"
    replies = {}
    for engine in runtime.engine_names:
        reply = _chat(client, engine, stop=[stop], min_tokens=30)
        assert reply.usage.completion_tokens >= 30, engine
        text = reply.choices[0].message.content
        assert text.startswith(cut.choices[0].message.content + stop), engine   # written through, not ended
        replies[engine] = (text, reply.choices[0].finish_reason)
    assert len(set(replies.values())) == 1, replies


def test_prompt_logprobs_score_the_prompt_as_vllm_returns_them(demo):
    """vLLM's prompt_logprobs (lm-eval's vLLM backend and perplexity scripts read them): per prompt token null for
    the first, then a dict by token id of the token itself (logprob, rank, decoded_token) and the k likeliest;
    on completions per choice, on chat at the top level. The scores are echo's (one scoring), the greedy reply's
    own tokens read back are rank 1, and the reply is the same under every engine with or without them; a stream
    asking for them is a 400 naming the field, as vLLM's."""
    import httpx

    client, runtime = demo
    root = str(client.base_url).rstrip("/").removesuffix("/v1")
    text = "The capital of France is Paris. The capital of Italy is"
    ids = httpx.post(root + "/tokenize", json={"prompt": text}).json()["tokens"]
    plain = client.completions.create(model="default", prompt=text, temperature=0, max_tokens=12, logprobs=1,
                                      extra_body={"engine": "raw"})
    scored = {}
    for engine in runtime.engine_names:
        reply = client.completions.create(model="default", prompt=text, temperature=0, max_tokens=12,
                                          extra_body={"engine": engine, "prompt_logprobs": 3})
        assert reply.choices[0].text == plain.choices[0].text, engine   # scoring changes no reply
        scored[engine] = reply.choices[0].prompt_logprobs
    table = scored["raw"]
    assert all(table == other for other in scored.values())
    assert len(table) == len(ids) and table[0] is None
    for token, entry in zip(ids[1:], table[1:]):
        own = entry[str(token)]
        assert own["decoded_token"] == runtime.bundle.tokenizer.decode([token]) and own["rank"] >= 1
        alternatives = sorted(entry.values(), key=lambda e: e["rank"])
        assert 3 <= len(entry) <= 4 and [e["rank"] for e in alternatives][:3] == [1, 2, 3]
        assert all(a["logprob"] >= b["logprob"] for a, b in zip(alternatives, alternatives[1:]))
        assert (own["rank"] == 1) == (own["logprob"] >= alternatives[0]["logprob"])
    # echo with logprobs scores the same prompt: the same numbers (its alternatives its own count)
    echo = client.completions.create(model="default", prompt=text, max_tokens=0, echo=True, logprobs=1,
                                     extra_body={"prompt_logprobs": 3}).choices[0]
    assert echo.logprobs.token_logprobs[1:] == [entry[str(t)]["logprob"] for t, entry in zip(ids[1:], table[1:])]
    assert all(len(alternatives) == 1 for alternatives in echo.logprobs.top_logprobs[1:])
    # the greedy reply's tokens, read back as prompt, are each the likeliest after what precedes them
    generated = list(runtime.bundle.tokenizer.encode(plain.choices[0].text, add_special_tokens=False))
    assert [runtime.bundle.tokenizer.decode([t]) for t in generated] == plain.choices[0].logprobs.tokens
    back = client.completions.create(model="default", prompt=ids + generated, max_tokens=1,
                                     extra_body={"prompt_logprobs": 0}).choices[0].prompt_logprobs
    assert [back[len(ids) + i][str(t)]["rank"] for i, t in enumerate(generated)] == [1] * len(generated)
    assert all(len(entry) == 1 for entry in back[1:])   # 0: the prompt token alone
    # chat: the rendered prompt's tokens, at the top level; truncated prompts are scored as run
    chat = client.chat.completions.create(model="default", messages=SHORT, temperature=0, max_tokens=8,
                                          extra_body={"prompt_logprobs": 1})
    assert len(chat.prompt_logprobs) == chat.usage.prompt_tokens and chat.prompt_logprobs[0] is None
    cut = client.chat.completions.create(model="default", messages=SHORT, temperature=0, max_tokens=8,
                                         extra_body={"prompt_logprobs": 1, "truncate_prompt_tokens": 5})
    assert len(cut.prompt_logprobs) == 5 == cut.usage.prompt_tokens
    assert getattr(_chat(client, "raw"), "prompt_logprobs", None) is None   # not asked: not there
    for body in ({"prompt_logprobs": 2, "stream": True}, {"prompt_logprobs": -1}, {"prompt_logprobs": 21}):
        with pytest.raises(openai.BadRequestError) as caught:
            client.completions.create(model="default", prompt=text, max_tokens=4, extra_body=body)
        assert caught.value.body["param"] == "prompt_logprobs", caught.value.body


def test_bans_that_leave_no_token_end_the_reply_alike_under_every_engine(demo):
    """allowed_token_ids that the output constraint permits none of, or min_tokens past a constraint's end, leave
    a position no token: the reply ends there (the ending token is all that is left), the same under every
    engine; it was a 500 under ddtree (no draft candidate) and another reply under mtp. With ignore_eos the reply
    runs on to max_tokens, writing nothing the constraint rejects, alike too."""
    client, runtime = demo
    outside = list(runtime.bundle.tokenizer.encode("zzz", add_special_tokens=False))
    for extra, expected in (({"allowed_token_ids": outside, "guided_choice": ["yes", "no"]}, ("", "stop")),
                            ({"allowed_token_ids": outside, "guided_choice": ["yes", "no"], "ignore_eos": True},
                             ("", "length")),
                            ({"guided_choice": ["yes"], "min_tokens": 6}, ("yes", "stop")),
                            ({"guided_choice": ["yes"], "ignore_eos": True}, ("yes", "length"))):
        for engine in runtime.engine_names:
            reply = client.chat.completions.create(model="default", messages=SHORT, temperature=0, max_tokens=12,
                                                   extra_body={"engine": engine, **extra})
            assert (reply.choices[0].message.content, reply.choices[0].finish_reason) == expected, (engine, extra)
