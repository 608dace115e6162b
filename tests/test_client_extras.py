"""Fields real clients send beside OpenAI's (vLLM's sampling extras, as Open WebUI, LibreChat, SillyTavern and
litellm pass them through), end to end on the embedded demo model through the openai SDK: each one does
what vLLM does with it, under every engine (speculation stays lossless: greedy engines agree)."""

from __future__ import annotations

import openai
import pytest

from gateway.http.app import create_app
from tests.fakes import live_server
from tests.ops_helpers import REPO

DEMO = REPO / "models" / "switchyard-demo"
# the demo model's greedy reply to this ends (EOS) after 42 tokens
SHORT = [{"role": "user", "content": "Say yes."}]


@pytest.fixture(scope="module")
def demo():
    from engines.runtime import load_runtime

    runtime = load_runtime(str(DEMO / "target"), draft_dir=str(DEMO / "drafter"))
    with live_server(create_app(runtime)) as srv:
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
