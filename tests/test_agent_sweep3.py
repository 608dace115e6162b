"""A third agent sweep: what coding agents (Claude Code, Codex CLI, aider, litellm, chat UIs) send and read
back, against served models. Each test is a defect the sweep found, reproduced with the SDKs or httpx."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest

from contracts.chat import TokenLogprob, TopLogprob
from contracts.engine import StepResult
from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _xml_call(city: str) -> str:
    return (f"<tool_call>\n<function=get_weather>\n<parameter=city>\n{city}\n</parameter>\n</function>\n"
            "</tool_call>")


TWO_CALLS = "I'll check both.\n</think>\n\n" + _xml_call("Paris") + "\n" + _xml_call("Rome")


class ScriptedEngine:
    """An engine that writes a fixed text, `width` tokens per step (a speculative engine's accepted run),
    with a made-up log-probability per token when asked."""

    def __init__(self, name: str, tokenizer, text: str, width: int):
        self.name, self.width, self.tokenizer = name, width, tokenizer
        self.script(text)

    def script(self, text: str) -> None:
        self.ids = list(self.tokenizer.encode(text, add_special_tokens=False)) + [self.tokenizer.eos_token_id]

    def _logprob(self, token: int, top: int) -> TokenLogprob:
        text = self.tokenizer.decode([token])
        return TokenLogprob(text, token, -0.5, tuple(TopLogprob(text, token, -0.5) for _ in range(top)))

    def generate(self, prompt_ids, params, cancel, switch=None, peers=None, prefix=None,
                 written=()) -> Iterator[StepResult]:
        for start in range(0, len(self.ids), self.width):
            tokens = self.ids[start:start + self.width]
            logprobs = [self._logprob(t, params.top_logprobs) for t in tokens] if params.logprobs else []
            yield StepResult(tokens=tokens, drafted=len(tokens) - 1, accepted=len(tokens) - 1, engine=self.name,
                             logprobs=logprobs)


@pytest.fixture(scope="module")
def scripted_server(tiny_qwen_chat_target):
    """A real Runtime (tokenizer, stop handling, reply splitting) over engines that write TWO_CALLS: raw one
    token per step, mtp and ddtree several."""
    from engines.bundle import load_bundle
    from engines.runtime import Runtime
    from gateway.http.app import create_app

    bundle = load_bundle(tiny_qwen_chat_target)
    tokenizer = bundle.tokenizer
    engines = {"raw": ScriptedEngine("raw", tokenizer, TWO_CALLS, 1),
               "mtp": ScriptedEngine("mtp", tokenizer, TWO_CALLS, 2),
               "ddtree": ScriptedEngine("ddtree", tokenizer, TWO_CALLS, 5)}
    with live_server(create_app(Runtime(bundle, engines, model_id="scripted"))) as srv:
        srv.engines, srv.tokenizer = engines, tokenizer
        yield srv
        for engine in engines.values():
            engine.script(TWO_CALLS)


def _script(srv, text: str) -> None:
    for engine in srv.engines.values():
        engine.script(text)


def test_one_call_only_ends_a_speculative_step_where_raw_would_stop(scripted_server):
    """parallel_tool_calls: false cut the reply after its first call, but counted (and gave logprobs for)
    every token of the speculative step in which the call closed: the same reply's usage differed by
    engine (here the second call's opening under ddtree)."""
    client = openai.OpenAI(base_url=scripted_server.base_url + "/v1", api_key="unused", max_retries=0)
    ask = [{"role": "user", "content": "Weather in Paris and Rome?"}]
    seen = set()
    for engine in ("raw", "mtp", "ddtree"):
        reply = client.chat.completions.create(model="default", messages=ask, tools=[WEATHER], max_tokens=200,
                                               parallel_tool_calls=False, logprobs=True, extra_body={"engine": engine})
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls", engine
        assert [c.function.arguments for c in choice.message.tool_calls] == ['{"city": "Paris"}'], engine
        streamed = list(client.chat.completions.create(
            model="default", messages=ask, tools=[WEATHER], max_tokens=200, parallel_tool_calls=False, stream=True,
            stream_options={"include_usage": True}, extra_body={"engine": engine}))
        seen.add((reply.usage.completion_tokens, len(choice.logprobs.content), streamed[-1].usage.completion_tokens))
    assert len(seen) == 1, seen
    (tokens, logprobs, streamed_tokens), = seen
    assert tokens == streamed_tokens
    assert logprobs == 0   # chat logprobs are the content's, and a call-only reply has none (test_agent_sweep6)


CUT_CALL = ("Checking.\n</think>\n\n<tool_call>\n<function=run>\n<parameter=command>\nrm -rf build "
            "&& make test\n</parameter>\n</function>\n</tool_call>")
RUN = {"name": "run", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                                       "required": ["command"]}}


def test_a_cut_tool_use_reads_the_same_unstreamed_as_streamed(qwen_chat_tokenizer):
    """A tool_use cut off by max_tokens came back unstreamed as a tool_use whose input was
    {"arguments": '{"command": "rm -rf'} (the cut JSON as text, under a key the tool does not take),
    while the stream (its input_json_delta, as the anthropic SDK reads it) gave the arguments complete so
    far: {} here, the cut string left out rather than run as "rm -rf". Both now agree, with stop_reason "max_tokens"."""
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply=CUT_CALL)
    with live_server(create_app(backend)) as srv:
        claude = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
        ask = {"model": "default", "max_tokens": 2, "tools": [RUN],
               "messages": [{"role": "user", "content": "Run the tests."}]}
        message = claude.messages.create(**ask)
        with claude.messages.stream(**ask) as stream:
            streamed = stream.get_final_message()
    assert message.stop_reason == streamed.stop_reason == "max_tokens"
    blocks = [(b.type, b.name, b.input) if b.type == "tool_use" else (b.type,) for b in message.content]
    assert blocks == [(b.type, b.name, b.input) if b.type == "tool_use" else (b.type,) for b in streamed.content]
    assert blocks[-1] == ("tool_use", "run", {})


THINK_THEN_ANSWER = "Let me think.\n</think>\n\nIt is sunny."


def test_responses_report_output_text_logprobs_and_reasoning_tokens(scripted_server):
    """The Responses API asked for logprobs (include ["message.output_text.logprobs"], top_logprobs) gave
    every output_text "logprobs": [], and usage.output_tokens_details.reasoning_tokens was always 0. Now the
    text part carries its own tokens' logprobs (not the reasoning's, not the template's blank lines), and
    the tokens inside <think>…</think> are counted, the same under every engine and streamed."""
    _script(scripted_server, THINK_THEN_ANSWER)
    reasoning = len(scripted_server.tokenizer.encode("Let me think.\n", add_special_tokens=False))
    client = openai.OpenAI(base_url=scripted_server.base_url + "/v1", api_key="unused", max_retries=0)
    ask = {"model": "default", "input": "Weather?", "include": ["message.output_text.logprobs"], "top_logprobs": 2}
    for engine in ("raw", "mtp", "ddtree"):
        response = client.responses.create(**ask, extra_body={"engine": engine})
        text = response.output[-1].content[0]
        assert response.output_text == "It is sunny." and [i.type for i in response.output] == ["reasoning", "message"]
        assert "".join(lp.token for lp in text.logprobs) == "It is sunny.", engine
        assert all(len(lp.top_logprobs) == 2 and lp.bytes == list(lp.token.encode()) for lp in text.logprobs)
        assert response.usage.output_tokens_details.reasoning_tokens == reasoning, engine
        assert response.usage.input_tokens_details.cached_tokens == 0
        events = list(client.responses.create(**ask, stream=True, extra_body={"engine": engine}))
        deltas = [lp.token for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
        done = next(e for e in events if e.type == "response.output_text.done")
        final = events[-1].response
        assert deltas == [lp.token for lp in done.logprobs] == [lp.token for lp in text.logprobs], engine
        assert final.output[-1].content[0].logprobs == text.logprobs
        assert final.usage.output_tokens_details.reasoning_tokens == reasoning
    plain = client.responses.create(model="default", input="Weather?")
    assert plain.output[-1].content[0].logprobs == []   # not asked for
    chat = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "Weather?"}])
    assert chat.usage.completion_tokens_details.reasoning_tokens == reasoning


def test_tool_arguments_that_are_no_object_in_history(qwen_chat_tokenizer):
    """A history call whose arguments were JSON but no object ("null", as some clients write a call
    without arguments, or "[1]") was a 400 in the template's words ("Can only get item pairs from a
    mapping"). "null" is a call without arguments, as "" already was; other JSON says what is wrong."""
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply="ok\n</think>\n\nDone.")
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)

        def turn(arguments: str):
            call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
            return client.chat.completions.create(model="default", tools=[WEATHER], max_tokens=16, messages=[
                {"role": "user", "content": "Weather?"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "18C"}])

        assert turn("null").choices[0].message.content == "Done."
        assert "<function=get_weather>\n</function>" in backend.encoded[-1]
        for arguments in ("[1]", '"Paris"', "3"):
            with pytest.raises(openai.BadRequestError) as bad:
                turn(arguments)
            assert bad.value.body["code"] == "invalid_tool_arguments", arguments
            assert "not a JSON object" in bad.value.body["message"] and "mapping" not in bad.value.body["message"]
