"""A second agent sweep: what coding agents, agent libraries (litellm, openai-agents) and chat UIs send,
against served models. Each test is a defect the sweep found, reproduced with the SDKs or httpx."""

from __future__ import annotations

import json
import time

import anthropic
import httpx
import openai
import pytest

from contracts.engine import StepResult
from engines.text import stream_text
from gateway.config import GatewayConfig
from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server
from tests.ops_helpers import REPO

DEMO = REPO / "models" / "switchyard-demo"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
THINK_THEN_CALL = ("Let me check.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n東京 🌧\n"
                   "</parameter>\n</function>\n</tool_call>")


@pytest.fixture(scope="module")
def demo_server():
    from engines.runtime import load_runtime

    runtime = load_runtime(str(DEMO / "target"), draft_dir=str(DEMO / "drafter"))
    runtime.set_prefix_cache(256 << 20)   # as `serve` runs it
    with live_server(create_app(runtime)) as srv:
        yield srv, runtime


def test_the_first_token_keeps_its_leading_space(qwen_chat_tokenizer):
    """mlx-lm's streaming detokenizer dropped the first token's leading space: every engine's text
    started one character short of what the model wrote."""
    ids = qwen_chat_tokenizer.encode(" a city", add_special_tokens=False)
    steps = (StepResult(tokens=[token]) for token in ids)
    chunks = list(stream_text(steps, qwen_chat_tokenizer, eos_token_ids=frozenset(), max_tokens=len(ids), stops=(),
                              prompt_tokens=1, cancelled=lambda: False))
    assert "".join(chunk.text for chunk in chunks) == " a city"


def test_completions_and_prefills_continue_the_text(demo_server):
    """/v1/completions of "Rome is" answered "a room..." (prompt + text = "Rome isa room", the logprobs'
    tokens " a" ... and text_offset disagreeing with the text), and an Anthropic prefill "Rome is" was
    continued as "a room": the space the model wrote was lost, under every engine."""
    srv, runtime = demo_server
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
    claude = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
    prefill = [{"role": "user", "content": "Write a sentence about Rome."}, {"role": "assistant", "content": "Rome is"}]
    for engine in runtime.engine_names:
        choice = client.completions.create(model="default", prompt="Rome is", max_tokens=4, temperature=0, logprobs=0,
                                           extra_body={"engine": engine}).choices[0]
        assert choice.logprobs.tokens[0].startswith(" ")   # the demo model's next word
        assert choice.text == "".join(choice.logprobs.tokens), engine
        streamed = "".join(c.choices[0].text for c in client.completions.create(
            model="default", prompt="Rome is", max_tokens=4, temperature=0, stream=True, extra_body={"engine": engine}))
        assert streamed == choice.text
        message = claude.messages.create(model="default", max_tokens=4, messages=prefill,
                                         extra_body={"engine": engine, "temperature": 0})
        assert message.content[0].text.startswith(" "), (engine, message.content[0].text)


def test_litellm_sends_its_provider_specific_fields_back(qwen_chat_tokenizer):
    """litellm's tool loop (`messages.append(response.choices[0].message)`, its documented pattern) sends
    the assistant turn back with `provider_specific_fields` (where it keeps the reply's `reasoning`): every
    second turn through litellm's openai/ and hosted_vllm/ providers was a 400 "Unrecognized request
    argument supplied: messages.1.provider_specific_fields". The body below is what litellm sent."""
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply=THINK_THEN_CALL)
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        message = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Weather?"}],
                                                 tools=[WEATHER], max_tokens=64).choices[0].message
        call = message.tool_calls[0]
        turn = {"role": "assistant", "reasoning_content": message.reasoning_content,
                "provider_specific_fields": {"reasoning": message.reasoning_content},
                "tool_calls": [{"function": {"arguments": call.function.arguments, "name": "get_weather"},
                                "id": call.id, "type": "function"}]}
        backend.reply = "done\n</think>\n\nRainy."
        response = httpx.post(srv.base_url + "/v1/chat/completions", json={
            "model": "default", "max_tokens": 8, "tools": [WEATHER],
            "messages": [{"role": "user", "content": "Weather?"}, turn,
                         {"role": "tool", "tool_call_id": call.id, "content": "rain"}]})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Rainy."


def test_anthropic_streams_report_the_cache_hit(demo_server):
    """A streamed /v1/messages (Claude Code streams every turn) reported `cache_read_input_tokens: 0` and
    the whole prompt as `input_tokens` on a prefix-cache hit, where the same request unstreamed said
    what the cache served: message_start was written before the first chunk was read."""
    srv, _ = demo_server
    claude = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
    ask = [{"role": "user", "content": "Tell me about the history of Rome, in some detail."}]
    claude.messages.create(model="default", max_tokens=2, messages=ask)   # the prompt is now cached
    whole = claude.messages.create(model="default", max_tokens=2, messages=ask).usage
    assert whole.cache_read_input_tokens > 0
    with claude.messages.stream(model="default", max_tokens=2, messages=ask) as stream:
        started = next(event for event in stream if event.type == "message_start").message.usage
        streamed = stream.get_final_message().usage
    expected = (whole.input_tokens, whole.cache_read_input_tokens)
    for usage in (started, streamed):
        assert (usage.input_tokens, usage.cache_read_input_tokens) == expected


def test_non_ascii_tool_arguments_come_back_as_written(qwen_chat_tokenizer):
    """A call's arguments came back ASCII-escaped ('{"city": "\\u6771\\u4eac \\ud83c\\udf27"}', the emoji
    as a surrogate pair), where OpenAI writes the text itself and a max_tokens-cut call here already did;
    Anthropic streams carried the escapes in `partial_json`."""
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply=THINK_THEN_CALL)
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        for stream in (False, True):
            reply = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Weather?"}],
                                                   tools=[WEATHER], max_tokens=64, stream=stream)
            calls = (["".join(c.function.arguments for chunk in reply for c in chunk.choices[0].delta.tool_calls or [])]
                     if stream else [c.function.arguments for c in reply.choices[0].message.tool_calls])
            assert calls == ['{"city": "東京 🌧"}']
        events = httpx.post(srv.base_url + "/v1/messages", json={
            "model": "default", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "Weather?"}],
            "tools": [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}]}).text
        partial = [json.loads(line[6:])["delta"]["partial_json"] for line in events.splitlines()
                   if line.startswith("data: ") and "input_json_delta" in line]
        assert "".join(partial) == '{"city": "東京 🌧"}' and "\\u" not in events, events


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 2}),
    ("/v1/messages", {"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
])
def test_stream_null_is_no_stream(path, body):
    """`"stream": null` (OpenAI's spec: `boolean | null`, defaulting to false; sent by clients that write out
    every optional field) was a 400 "Invalid value for 'stream': Input should be a valid boolean" on every
    endpoint, while every other optional field took its null."""
    with live_server(create_app(FakeBackend())) as srv:
        response = httpx.post(srv.base_url + path, json={**body, "stream": None})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")


def test_an_anthropic_timeout_is_a_timeout_error():
    """The per-request timeout (a 504, or an error event mid-stream) was typed "api_error" on /v1/messages,
    Anthropic's type for its own internal errors; Anthropic's 504 is a "timeout_error"."""
    backend = FakeBackend(step_seconds=0.05, poll_cancel=False)
    with live_server(create_app(backend, config=GatewayConfig(request_timeout_seconds=0.3))) as srv:
        ask = {"model": "default", "max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]}
        backend.reply = " ".join(["word"] * 1000)   # far more steps than the deadline allows
        response = httpx.post(srv.base_url + "/v1/messages", json=ask, timeout=30)
        assert response.status_code == 504
        assert response.json()["error"]["type"] == "timeout_error"
        streamed = httpx.post(srv.base_url + "/v1/messages", json={**ask, "stream": True}, timeout=30).text
        assert 'event: error\ndata: {"type":"error","error":{"type":"timeout_error"' in streamed, streamed[-300:]


def test_anthropic_client_errors_are_never_api_errors():
    """A 415 (a body sent as text/plain) or a 408 (a body too slow to arrive) on /v1/messages was typed
    "api_error", Anthropic's type for a failure on its side, which clients report as a server fault."""
    with live_server(create_app(FakeBackend())) as srv:
        wrong_type = httpx.post(srv.base_url + "/v1/messages", content=b"{}", headers={"content-type": "text/plain"})
        assert wrong_type.status_code == 415
        assert wrong_type.json()["error"]["type"] == "invalid_request_error"


def _generate(tokenizer, steps: list[list[int]], stops: tuple[str, ...]) -> tuple[str, int, list[int], str | None]:
    chunks = list(stream_text((StepResult(tokens=tokens) for tokens in steps), tokenizer, eos_token_ids=frozenset(),
                              max_tokens=100, stops=stops, prompt_tokens=1, cancelled=lambda: False))
    return ("".join(c.text for c in chunks), chunks[-1].completion_tokens, [t for c in chunks for t in c.token_ids],
            chunks[-1].finish_reason)


def test_a_stop_string_ends_a_speculative_step_where_raw_would_stop(qwen_chat_tokenizer):
    """A stop string inside a speculative step (several tokens at once) ended the text there but counted,
    and gave logprobs for, every token of the step: usage.completion_tokens of the same greedy reply was 3
    under raw and 5 under ddtree."""
    ids = qwen_chat_tokenizer.encode("def add(a, b):\n    return a + b\n", add_special_tokens=False)
    one_by_one = _generate(qwen_chat_tokenizer, [[t] for t in ids], ("\n",))
    assert one_by_one[0] == "def add(a, b):" and one_by_one[3] == "stop"
    for width in (2, 3, len(ids)):
        steps = [ids[i:i + width] for i in range(0, len(ids), width)]
        assert _generate(qwen_chat_tokenizer, steps, ("\n",)) == one_by_one, width


def test_engines_count_the_same_tokens_when_a_stop_string_ends_the_reply(demo_server):
    """The same greedy reply, cut by a stop string, counted different usage (and logprobs) per engine."""
    srv, runtime = demo_server
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
    ask = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
    seen = set()
    for engine in runtime.engine_names:
        reply = client.chat.completions.create(model="default", messages=ask, max_tokens=40, temperature=0, stop=["\n"],
                                               logprobs=True, extra_body={"engine": engine})
        choice = reply.choices[0]
        assert choice.finish_reason == "stop"
        seen.add((choice.message.content, reply.usage.completion_tokens, len(choice.logprobs.content)))
    assert len(seen) == 1, seen


@pytest.fixture(scope="module")
def tiny_runtime(tiny_target, tiny_drafter):
    from engines.runtime import load_runtime

    return load_runtime(str(tiny_target), draft_dir=str(tiny_drafter))


def test_a_long_prompt_alone_gives_the_worker_back_between_pieces(tiny_runtime):
    """A request alone prefilled its whole prompt in one step: a client that hung up (Esc in an agent, a
    client timeout) kept the worker busy until the end of the prompt (17 s for 7k tokens of the demo model
    here, minutes for a long agent context on a large model), and the next request waited behind it."""
    from contracts.engine import CancelToken, Pause
    from contracts.sampling import SamplingParams
    from engines.prefill import PREFILL_CHUNK

    prompt = [5 + i % 200 for i in range(PREFILL_CHUNK + 64)]
    for engine in tiny_runtime.engine_names:
        cancel = CancelToken()
        chunks = tiny_runtime.generate(prompt, SamplingParams(max_tokens=2, temperature=0.0), engine, cancel)
        assert isinstance(next(chunks), Pause), engine   # the worker can see the cancel here
        cancel.cancel()
        chunks.close()


class _EndlessPrefill(FakeBackend):
    """A prompt whose prefill gives the worker back between pieces, many times."""

    pauses: int = 0

    def _generate(self, prompt_ids, params, engine, cancel, switch, reply):
        from contracts.engine import Pause

        for _ in range(200):
            time.sleep(0.05)
            self.pauses += 1
            yield Pause(0, 1)
        yield from super()._generate(prompt_ids, params, engine, cancel, switch, reply)


def test_the_deadline_stops_a_long_prefill():
    """The per-request timeout was checked only after a chunk of output: a prompt whose prefill outlived
    the deadline ran to its end before the 504 (here all 200 pieces, 10 s past a 0.3 s deadline)."""
    backend = _EndlessPrefill()
    with live_server(create_app(backend, config=GatewayConfig(request_timeout_seconds=0.3))) as srv:
        response = httpx.post(srv.base_url + "/v1/chat/completions", timeout=60,
                              json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert response.status_code == 504, response.text
    assert backend.pauses < 200
