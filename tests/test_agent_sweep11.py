"""An eleventh agent sweep: requests as the openai and anthropic SDKs (and the agents on them) send them,
against a served gateway. Each test is a gap the sweep found."""

from __future__ import annotations

import math

import anthropic
import mlx.core as mx
import pytest

from contracts.errors import InvalidRequestError
from contracts.sampling import SamplingParams
from engines.bundle import GenerationDefaults
from engines.sampling import Rng, SamplerConfig, candidates, choose, resolve
from tests.agent_sweeps import WEATHER
from tests.agent_sweeps import openai_client as _openai
from tests.agent_sweeps import post as _post
from tests.agent_sweeps import srv  # noqa: F401 - srv is the shared fixture

ASK = [{"role": "user", "content": "Weather in Paris?"}]


def _anthropic(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)


def test_top_p_zero_keeps_only_the_most_likely_token(srv):
    """OpenAI takes top_p from 0 to 1, and clients that want determinism without temperature 0 send top_p 0;
    here it was a 400 ("greater than 0") on every API. top_p 0 is now the nucleus of the most likely token
    alone (as HF and vLLM keep at least one token): the one sampler keeps the top token (and any tied with it),
    so every engine's draws and verifies see the same one-token distribution."""
    client = _openai(srv)
    client.chat.completions.create(model="default", messages=ASK, max_tokens=2, top_p=0)
    assert srv.backend.calls[-1]["params"].top_p == 0.0
    client.completions.create(model="default", prompt="hi", max_tokens=1, top_p=0)
    client.responses.create(model="default", input="hi", max_output_tokens=16, top_p=0)
    assert srv.backend.calls[-1]["params"].top_p == 0.0
    _anthropic(srv).messages.create(model="default", max_tokens=8, messages=ASK, extra_body={"top_p": 0})
    assert srv.backend.calls[-1]["params"].top_p == 0.0
    for bad in (-0.1, 1.1):
        assert _post(srv, "/v1/chat/completions", {"messages": ASK, "top_p": bad}).status_code == 400

    cfg = resolve(SamplingParams(temperature=1.0, top_p=0.0), GenerationDefaults())
    logits = mx.array([[0.5, 3.0, 1.0, 3.0 - 1e-3], [2.0, -1.0, 2.0, 0.0]])
    dist = candidates(logits, cfg).dense(4)
    assert [[math.isfinite(v) for v in row] for row in dist.tolist()] == [[False, True, False, False],
                                                                        [True, False, True, False]]
    assert abs(math.exp(dist.tolist()[0][1]) - 1.0) < 1e-6   # all the mass on the top token
    with_top_k = candidates(logits, SamplerConfig(temperature=0.7, top_p=0.0, top_k=2, min_p=0.0)).dense(4)
    assert [math.isfinite(v) for v in with_top_k.tolist()[0]] == [False, True, False, False]
    assert choose(logits[:1], cfg, Rng(3)).tolist() == [1]


CHAT_WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                                 "parameters": WEATHER["parameters"]}}
XML_CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"


def test_tool_choice_none_shows_the_tools_but_allows_no_call(srv, qwen_chat_tokenizer):
    """OpenAI's tool_choice "none" means the model may not call a tool, not that it does not know them: the
    tools stay in the prompt (a conversation whose earlier turns called them reads the same, and the prompt's
    prefix stays cached across turns that switch tool_choice). Here "none" took the tools out of the prompt,
    on /v1/chat/completions, /v1/responses and Anthropic's tool_choice {"type": "none"} alike. The template now
    renders them, and the call's opening token (Qwen's <tool_call>) is banned from the reply (a -inf logit
    bias, applied as every bias is: every engine alike); a call the model writes anyway (an opening of several
    tokens cannot be banned) ends the reply and is returned neither as a call nor as text."""
    srv.backend.reply = "Fine.\n</think>\n\nIt is sunny."
    start = qwen_chat_tokenizer.convert_tokens_to_ids("<tool_call>")
    asks = {
        "chat": lambda: _openai(srv).chat.completions.create(model="default", messages=ASK, tools=[CHAT_WEATHER],
                                                             tool_choice="none", max_tokens=16),
        "responses": lambda: _openai(srv).responses.create(model="default", input="Weather in Paris?", tools=[WEATHER],
                                                           tool_choice="none", max_output_tokens=16),
        "messages": lambda: _anthropic(srv).messages.create(
            model="default", max_tokens=16, messages=ASK, tool_choice={"type": "none"},
            tools=[{"name": "get_weather", "input_schema": WEATHER["parameters"]}]),
    }
    for api, ask in asks.items():
        ask()
        prompt = srv.backend.encoded[-1]
        assert "<tools>" in prompt and "get_weather" in prompt, api
        assert (start, -math.inf) in srv.backend.calls[-1]["params"].logit_bias, api
        assert srv.backend.calls[-1]["reply"].refuse_calls is True, api
    # the count matches the prompt the reply is generated from
    anthropic_weather = {"name": "get_weather", "input_schema": WEATHER["parameters"]}
    counted = _post(srv, "/v1/messages/count_tokens", {"messages": ASK, "tool_choice": {"type": "none"},
                                                       "tools": [anthropic_weather]})
    plain = _post(srv, "/v1/messages/count_tokens", {"messages": ASK})
    assert counted.json()["input_tokens"] > plain.json()["input_tokens"]
    # a call written anyway (the fake ignores the ban) is no call and no text: the answer before it stays
    srv.backend.reply = f"Fine.\n</think>\n\nLet me look.\n\n{XML_CALL}"
    reply = asks["chat"]()
    assert reply.choices[0].message.tool_calls is None and reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.content == "Let me look."
    assert [block.type for block in asks["messages"]().content] == ["thinking", "text"]
    # auto offers them with no ban
    _openai(srv).chat.completions.create(model="default", messages=ASK, tools=[CHAT_WEATHER], max_tokens=16)
    assert srv.backend.calls[-1]["params"].logit_bias == ()


def test_a_call_written_under_tool_choice_none_ends_the_reply_unreturned(demo_tokenizer):
    """Where the call's opening is several tokens (the demo template's <tool_call> is text), no token can be
    banned: the reply is read for calls, and one written anyway ends the reply (every engine stops at the
    token that closes it: FirstCallEnd) and is dropped with its markup; the finish reason stays "stop"."""
    from contracts.engine import GenerationChunk
    from engines.chat import chat_prompt
    from engines.reply import FirstCallEnd, ReplySplitter, split_reply

    weather = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER["parameters"]}}
    prompt = chat_prompt(demo_tokenizer, ASK, [weather], "none")
    assert "get_weather" in demo_tokenizer.decode(prompt.ids) and prompt.banned == ()
    assert prompt.reply.refuse_calls and FirstCallEnd.wanted(prompt.reply)
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    ends = FirstCallEnd(demo_tokenizer, prompt.reply)
    assert not ends("Let me look.\n") and ends(call)
    texts = ["Let me look.\n", call]
    chunks = [GenerationChunk(text, [1], "stop" if i == len(texts) - 1 else None, None, 3, i + 1)
              for i, text in enumerate(texts)]
    out = list(split_reply(iter(chunks), ReplySplitter(demo_tokenizer, prompt.reply)))
    assert "".join(c.text for c in out) == "Let me look." and not any(c.tool_calls for c in out)
    assert out[-1].finish_reason == "stop"
    auto = chat_prompt(demo_tokenizer, ASK, [weather], "auto")
    assert not auto.reply.refuse_calls and not FirstCallEnd.wanted(auto.reply)
    assert not FirstCallEnd.wanted(chat_prompt(demo_tokenizer, ASK).reply)


def test_tool_choice_none_bans_the_call_on_a_real_runtime(tiny_qwen_chat_target, qwen_chat_tokenizer):
    """On the runtime, every engine: a reply pushed towards a call (logit_bias +100 on <tool_call>) opens one
    under tool_choice "auto" and never under "none", whose ban outweighs any bias."""
    from engines.runtime import load_runtime
    from gateway.http.app import create_app
    from tests.fakes import live_server

    start = qwen_chat_tokenizer.convert_tokens_to_ids("<tool_call>")
    runtime = load_runtime(str(tiny_qwen_chat_target))
    with live_server(create_app(runtime)) as server:
        client = _openai(server)
        for engine in runtime.engine_names:
            replies = {}
            for choice in ("auto", "none"):
                reply = client.chat.completions.create(
                    model="default", messages=ASK, tools=[CHAT_WEATHER], tool_choice=choice, max_tokens=4,
                    temperature=0, reasoning_effort="none", logit_bias={str(start): 100},
                    extra_body={"engine": engine}).choices[0]
                replies[choice] = (reply.message.content or "") + str(reply.message.tool_calls or "")
            assert "<tool_call>" in replies["auto"] or "get_weather" in replies["auto"], (engine, replies)
            assert "<tool_call>" not in replies["none"], (engine, replies)


def test_an_empty_prompt_is_generated_from_the_start_of_text(srv, tiny_qwen_chat_target):
    """OpenAI's /v1/completions takes `prompt: ""` (the model writes from the start of a document; clients
    probe a server with it, and a batch may hold one); here it was a 400 "prompt must not be empty". The
    runtime now generates an empty prompt from the tokenizer's beginning-of-sequence token, or where it has
    none (Qwen's) from its end-of-text token, which is what a pretraining document follows; a tokenizer with
    neither is a 400 that says so."""
    from engines.runtime import load_runtime
    from engines.text import start_of_text
    from gateway.http.app import create_app
    from tests.fakes import live_server

    reply = _openai(srv).completions.create(model="default", prompt="", max_tokens=2)
    assert reply.choices[0].text and srv.backend.calls[-1]["prompt_ids"]
    batch = _openai(srv).completions.create(model="default", prompt=["hi", ""], max_tokens=1)
    assert len(batch.choices) == 2
    runtime = load_runtime(str(tiny_qwen_chat_target))
    endoftext = runtime.bundle.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert runtime.encode_prompt("") == [endoftext]
    with live_server(create_app(runtime)) as server:
        for engine in runtime.engine_names:
            done = _openai(server).completions.create(model="default", prompt="", max_tokens=3, temperature=0,
                                                      extra_body={"engine": engine})
            assert done.usage.prompt_tokens == 1 and done.usage.completion_tokens >= 1, engine

    class Bare:   # a tokenizer with no start token of either kind
        bos_token_id = None

        def convert_tokens_to_ids(self, token: str) -> None:
            return None

    with pytest.raises(InvalidRequestError) as refused:
        start_of_text(Bare())
    assert refused.value.param == "prompt" and "beginning-of-sequence" in str(refused.value)


def test_best_of_equal_to_n_is_plain_n_and_more_returns_the_likeliest(srv):
    """OpenAI's legacy completions take best_of >= n (LangChain's OpenAI LLM writes best_of=1 out, and clients
    that mirror n into best_of send best_of == n); here anything but best_of 1 was a 400. best_of == n is now
    plain n; best_of > n generates best_of choices per prompt and returns the n of highest mean token
    log-probability (OpenAI's rule), renumbered, usage counting every one generated (as OpenAI bills); it
    cannot be streamed (the best are known at the end), and best_of < n is a 400, as OpenAI's."""
    srv.backend.reply = "The quick brown fox"
    client = _openai(srv)
    same = client.completions.create(model="default", prompt="hi", n=2, best_of=2, max_tokens=2)
    assert [c.index for c in same.choices] == [0, 1] and srv.backend.calls[-1]["params"].logprobs is False
    before = len(srv.backend.calls)
    best = client.completions.create(model="default", prompt=["a", "b"], n=1, best_of=3, max_tokens=2)
    assert len(srv.backend.calls) - before == 6 and srv.backend.calls[-1]["params"].logprobs is True
    assert [c.index for c in best.choices] == [0, 1] and best.choices[0].logprobs is None
    assert best.usage.completion_tokens == 12
    for body in ({"best_of": 1, "n": 2}, {"best_of": 3, "stream": True}, {"best_of": 9}):
        refused = _post(srv, "/v1/completions", {"prompt": "hi", "max_tokens": 1, **body})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "best_of", (body, refused.text)


def test_best_of_keeps_the_choices_of_highest_mean_logprob():
    from contracts.chat import TokenLogprob
    from gateway.http.openai_render import best_choices
    from gateway.http.record import ChoiceReply

    def choice(index: int, *logprobs: float) -> ChoiceReply:
        return ChoiceReply(index, logprobs=[TokenLogprob("x", 1, lp) for lp in logprobs])

    # two prompts, best_of 3, n 2: per prompt the two likeliest per token, likeliest first; an empty choice
    # (no token to rank it by) comes last
    generated = [choice(0, -1.0, -3.0), choice(1, -0.5), choice(2, -5.0), choice(3), choice(4, -0.1), choice(5, -2.0)]
    kept = best_choices(generated, n=2, best_of=3)
    assert [c.index for c in kept] == [0, 1, 2, 3]
    assert [c.logprobs[0].logprob for c in kept] == [-0.5, -1.0, -0.1, -2.0]


def test_responses_fields_for_features_not_hosted_take_their_empty_values(srv):
    """The openai SDK's ResponseCreateParams has `prompt` (a stored prompt template), `background_options`,
    `access_programs` and `image`, its tools and function_call items `async`; clients that write every field
    out send them null or empty, yet each was an "Unrecognized request argument" 400. Null and empty values
    (and `async: false` on a tool; a resent call's `async` either way: history) are accepted; a stored
    prompt, background options or an asynchronous tool are a 400 naming the feature not hosted here."""
    tool = {**WEATHER, "strict": False, "async": False}
    reply = _openai(srv).responses.create(
        model="default", input="Weather in Paris?", tools=[tool], max_output_tokens=16,
        extra_body={"prompt": None, "background_options": {}, "access_programs": {}, "image": None})
    assert reply.status == "completed"
    assert reply.tools[0].to_dict()["async"] is False   # the tool echoed as it was sent
    history = [{"role": "user", "content": "Weather in Paris?"},
               {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}',
                "async": True},
               {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]
    assert _post(srv, "/v1/responses", {"input": history, "tools": [WEATHER]}).status_code == 200
    for field, value, words in (("prompt", {"id": "pmpt_1", "version": "2"}, "stored prompt"),
                                ("background_options", {"completion_window": "2h"}, "background"),
                                ("access_programs", {"cyber": "standard"}, "access program"),
                                ("tools", [{**tool, "async": True}], "asynchronous")):
        refused = _post(srv, "/v1/responses", {"input": "hi", field: value})
        assert refused.status_code == 400, (field, refused.text)
        assert words in refused.json()["error"]["message"], (field, refused.text)


def test_anthropic_container_and_mcp_servers_take_their_empty_values(srv):
    """Anthropic's Messages API has `container` (its code execution's container) and, in the SDK's beta
    messages, `mcp_servers` (its MCP connector); clients that write them out send null and [], and each was
    an "Unrecognized request argument" 400. Those are accepted; a container or an MCP server is a 400 that
    names the server-side feature not hosted here."""
    client = _anthropic(srv)
    reply = client.messages.create(model="default", max_tokens=8, messages=ASK, container=None,
                                   extra_body={"mcp_servers": []})
    assert reply.stop_reason
    assert _post(srv, "/v1/messages/count_tokens", {"messages": ASK, "mcp_servers": []}).status_code == 200
    server = {"type": "url", "url": "https://example.com/mcp", "name": "example"}
    for field, value, words in (("container", "container_1", "code execution"),
                                ("mcp_servers", [server], "MCP connector")):
        refused = _post(srv, "/v1/messages", {"max_tokens": 8, "messages": ASK, field: value})
        assert refused.status_code == 400 and refused.json()["type"] == "error", refused.text
        assert words in refused.json()["error"]["message"], (field, refused.text)


def test_resent_function_calls_with_their_caller_are_accepted(srv):
    """The openai SDK's Responses function_call items carry `caller` ({"type": "direct"}: the model called it)
    and `namespace` (the namespace tool it belongs to), and openai-agents sends output items back as returned: a
    conversation begun on OpenAI's API and continued here was an "Unrecognized request argument" 400
    (input.N.caller). A direct caller and a null namespace are accepted; a call made by a program (code
    execution) or in a namespace (tools this server is never offered) is a 400 naming the field."""
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}',
            "status": "completed"}
    def history(**fields: object) -> list[dict]:
        return [{"role": "user", "content": "Weather in Paris?"}, {**call, **fields},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]

    reply = _openai(srv).responses.create(model="default", input=history(caller={"type": "direct"}, namespace=None),
                                          tools=[WEATHER], max_output_tokens=16)
    assert reply.status == "completed"
    assert srv.backend.chats[-1]["messages"][1]["tool_calls"][0]["function"]["name"] == "get_weather"
    for fields, param in (({"caller": {"type": "program", "caller_id": "p1"}}, "input.1.caller"),
                          ({"namespace": "weather"}, "input.1.namespace")):
        refused = _post(srv, "/v1/responses", {"input": history(**fields), "tools": [WEATHER]})
        assert refused.status_code == 400 and refused.json()["error"]["param"].startswith(param), refused.text
