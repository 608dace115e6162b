"""What agent frameworks send and parse, reproduced with the plain SDKs and httpx: each test is a
defect an agent-library sweep found (litellm, LangChain, pydantic-ai, openai-agents, instructor, the
AI SDK's openai-compatible provider, Claude-Code-style Anthropic clients) against the running server.
"""

from __future__ import annotations

import re

import anthropic
import httpx
import openai
import pytest

from gateway.config import GatewayConfig
from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server

ASK = [{"role": "user", "content": "hi"}]
# the text clients match a context overflow on: litellm's ContextWindowExceededError (OpenAI's words),
# and Anthropic's two messages (compact on "prompt is too long"; retry with a max_tokens that fits)
OPENAI_OVERFLOW = "This model's maximum context length is"
ANTHROPIC_MAX_TOKENS = re.compile(r"input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+)")


@pytest.fixture(scope="module")
def tiny_runtime_server(tiny_target):
    from engines.runtime import load_runtime

    runtime = load_runtime(str(tiny_target))
    with live_server(create_app(runtime)) as srv:
        yield srv, runtime


def test_context_overflow_is_worded_as_each_api_words_it(tiny_runtime_server):
    """A prompt plus max_tokens over the context was "prompt (N tokens) plus max_tokens (M) exceeds the
    model's context length (C)": right code, but no client recognised it (litellm raised a plain
    BadRequestError, not ContextWindowExceededError; Anthropic clients neither compacted nor retried)."""
    srv, runtime = tiny_runtime_server
    context = runtime.context_length
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="default", messages=ASK, max_tokens=context)
    assert err.value.body["code"] == "context_length_exceeded"
    assert err.value.body["message"].startswith(OPENAI_OVERFLOW)
    assert f"{context} tokens" in err.value.body["message"] and f"{context} in the completion" in err.value.body["message"]

    claude = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model="default", messages=ASK, max_tokens=context)
    match = ANTHROPIC_MAX_TOKENS.search(err.value.body["error"]["message"])
    assert match is not None, err.value.body
    prompt, max_tokens, limit = map(int, match.groups())
    assert max_tokens == context and limit == context and 0 < prompt < context

    too_long = [{"role": "user", "content": "word " * (context + 100)}]
    for stream in (False, True):
        response = httpx.post(srv.base_url + "/v1/messages", json={"model": "default", "max_tokens": 8,
                                                                   "messages": too_long, "stream": stream})
        assert response.status_code == 400
        assert response.json()["error"]["message"].startswith("prompt is too long: "), response.text


def test_a_prompt_that_leaves_no_room_is_worded_as_openai_words_it():
    """Without max_tokens the prompt alone is too long: OpenAI's "your messages resulted in N tokens"."""
    backend = FakeBackend(context_length=50)
    with live_server(create_app(backend)) as srv:
        response = httpx.post(srv.base_url + "/v1/chat/completions",
                              # the fake template renders this to exactly 50 characters: no room left
                              json={"messages": [{"role": "user", "content": "y" * 29}]})
    error = response.json()["error"]
    assert response.status_code == 400 and error["code"] == "context_length_exceeded"
    assert error["message"].startswith(OPENAI_OVERFLOW) and "max_tokens" not in error["message"]


EPHEMERAL = {"type": "ephemeral"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _ai_sdk_history(hint: dict) -> list[dict]:
    """A conversation as the AI SDK's openai-compatible provider writes it, with `hint` spread where
    its providerOptions.openaiCompatible metadata goes: messages, text parts, tool calls."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    return [{"role": "system", "content": "You are a coding agent.", **hint},
            {"role": "user", "content": [{"type": "text", "text": "Weather?", **hint},
                                         {"type": "text", "text": "In Paris.", **hint}]},
            {"role": "assistant", "content": "", "tool_calls": [{**call, **hint}], **hint},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny", **hint},
            {"role": "user", "content": "Thanks.", **hint}]


def test_cache_control_hints_are_accepted_and_change_nothing(qwen_chat_tokenizer):
    """opencode and other AI-SDK agents put `cache_control: {"type": "ephemeral"}` on messages, text
    parts and tool calls (prompt-caching breakpoints for Claude-named models): every such request was
    a 400 "Unrecognized request argument supplied: messages.0.cache_control"."""
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply="done\n</think>\n\nok")
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        for hint in ({}, {"cache_control": EPHEMERAL}):
            reply = client.chat.completions.create(model="default", messages=_ai_sdk_history(hint), tools=[WEATHER],
                                                   max_tokens=4)
            assert reply.choices[0].message.content == "ok"
    plain, hinted = backend.encoded[-2:]
    assert hinted == plain and "<tool_response>\nsunny\n</tool_response>" in hinted


USER_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
               "required": ["name", "age"]}


def test_json_object_with_a_schema_is_decoded_against_the_schema():
    """instructor's JSON_SCHEMA mode (and llama.cpp's server, Together, Fireworks) put the schema in
    `response_format: {"type": "json_object", "schema": ...}`: it was a 400 "Unrecognized request
    argument supplied: response_format.schema" on chat, and silently ignored on the Responses API."""
    backend = FakeBackend()
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        as_schema = {"type": "json_schema", "json_schema": {"name": "User", "schema": USER_SCHEMA}}
        client.chat.completions.create(model="default", messages=ASK, max_tokens=2, response_format=as_schema)
        expected = backend.calls[-1]["params"].grammar
        assert expected is not None
        client.chat.completions.create(model="default", messages=ASK, max_tokens=2,
                                       response_format={"type": "json_object", "schema": USER_SCHEMA})
        assert backend.calls[-1]["params"].grammar == expected
        client.responses.create(model="default", input="hi", max_output_tokens=2,
                                text={"format": {"type": "json_object", "schema": USER_SCHEMA}})
        assert backend.calls[-1]["params"].grammar == expected
        client.chat.completions.create(model="default", messages=ASK, max_tokens=2, response_format={"type": "json_object"})
        assert backend.calls[-1]["params"].grammar not in (None, expected)   # any object, as before
        bad = httpx.post(srv.base_url + "/v1/chat/completions", json={
            "messages": ASK, "response_format": {"type": "json_object", "schema": {"type": "object", "required": 3}}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "response_format.schema", bad.text


PREFILL = '{"name":'
CONTINUATION = ' "Tom", "age": 3}'   # a leading space: the next word's, not the template's blank line


@pytest.fixture
def prefill_server(qwen_chat_tokenizer):
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply=CONTINUATION)
    with live_server(create_app(backend)) as srv:
        yield srv, backend


def test_anthropic_prefill_is_continued(prefill_server):
    """Anthropic's prefill (the last message is the assistant's, its text the start of the reply) was
    rendered as a finished turn followed by a new one: the model started over. litellm's anthropic/
    provider, which prepends the prefill to the reply it returns, gave '{"name":```json ...'."""
    srv, backend = prefill_server
    claude = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
    conversation = [{"role": "user", "content": "A cat as JSON"}, {"role": "assistant", "content": PREFILL}]
    message = claude.messages.create(model="default", max_tokens=16, messages=conversation)
    assert backend.encoded[-1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n" + PREFILL)
    assert [block.text for block in message.content] == [CONTINUATION] and message.stop_reason == "end_turn"
    with claude.messages.stream(model="default", max_tokens=16, messages=conversation) as stream:
        assert "".join(stream.text_stream) == CONTINUATION
    # a final assistant turn with no text starts nothing: a new reply, as before; one of blanks ends in
    # whitespace, which Anthropic refuses ("final assistant content cannot end with trailing whitespace")
    ask = conversation[0]
    claude.messages.create(model="default", max_tokens=16, messages=[ask, {"role": "assistant", "content": []}])
    assert backend.encoded[-1].endswith("<|im_start|>user\nA cat as JSON<|im_end|>\n<|im_start|>assistant\n<think>\n")
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model="default", max_tokens=16, messages=[ask, {"role": "assistant", "content": "  \n"}])


def test_prefix_true_continues_the_last_assistant_message(prefill_server):
    """DeepSeek's and Mistral's prefix completion (`"prefix": true` on the last assistant message, which
    Aider sends to resume a reply cut at max_tokens) was a 400 "Unrecognized request argument supplied:
    messages.1.prefix"."""
    srv, backend = prefill_server
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
    conversation = [{"role": "user", "content": "A cat as JSON"}, {"role": "assistant", "content": PREFILL, "prefix": True}]
    reply = client.chat.completions.create(model="default", messages=conversation, max_tokens=16)
    assert backend.encoded[-1].endswith("<think>\n\n</think>\n\n" + PREFILL)
    assert reply.choices[0].message.content == CONTINUATION
    # without `prefix` the last assistant message is a finished turn, as the OpenAI API reads it
    client.chat.completions.create(model="default", messages=[conversation[0], {"role": "assistant", "content": PREFILL}],
                                   max_tokens=16)
    assert backend.encoded[-1].endswith(PREFILL + "<|im_end|>\n<|im_start|>assistant\n<think>\n")

    def refused(messages: list[dict], **extra) -> dict:
        response = httpx.post(srv.base_url + "/v1/chat/completions", json={"messages": messages, **extra})
        assert response.status_code == 400, response.text
        return response.json()["error"]

    misplaced = refused([conversation[1], conversation[0]])
    assert (misplaced["param"], misplaced["code"]) == ("messages.0.prefix", "invalid_prefix")
    with_call = {**conversation[1], "tool_calls": [{"id": "c", "type": "function",
                                                    "function": {"name": "get_weather", "arguments": "{}"}}]}
    assert refused([conversation[0], with_call], tools=[WEATHER])["code"] == "invalid_prefix"
    assert refused(conversation, tools=[WEATHER], tool_choice="required")["code"] == "conflicting_constraints"
    assert refused(conversation, response_format={"type": "json_object"})["code"] == "conflicting_constraints"


def test_prefill_on_a_real_runtime(tiny_runtime_server):
    """The continued prompt through the real runtime (template, prefix-cache points, engines): counted and
    served; the prompt is the conversation up to the prefill, with no new turn after it."""
    srv, runtime = tiny_runtime_server
    conversation = [{"role": "user", "content": "A cat as JSON"}, {"role": "assistant", "content": PREFILL}]
    prompt = runtime.chat_prompt([dict(m) for m in conversation], continue_final=True)
    assert runtime.bundle.tokenizer.decode(prompt.ids).endswith(PREFILL)
    claude = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
    assert claude.messages.count_tokens(model="default", messages=conversation).input_tokens == len(prompt.ids)
    for engine in runtime.engine_names:
        message = claude.messages.create(model="default", max_tokens=4, messages=conversation, extra_body={"engine": engine})
        assert message.usage.input_tokens + message.usage.cache_read_input_tokens == len(prompt.ids)


CITY_DAYS = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}
# the fake backend emits one space-separated word per token: max_tokens cuts the call between words
XML_CALL = ("done\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York City\n</parameter>\n"
            "<parameter=days>\n3 \n</parameter>\n</function>\n </tool_call>")


def _words_until(reply: str, cut: str) -> int:
    """max_tokens that ends the fake generation right after `cut` (a space-separated word boundary)."""
    return len(reply[: reply.index(cut) + len(cut)].split(" "))


def _cut(client: openai.OpenAI, max_tokens: int, stream: bool, **extra) -> tuple[str | None, list, str]:
    """(content, [(name, arguments)], finish_reason) of a reply cut at max_tokens."""
    kwargs = dict(model="default", messages=ASK, tools=[CITY_DAYS], max_tokens=max_tokens, **extra)
    if not stream:
        choice = client.chat.completions.create(**kwargs).choices[0]
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        return choice.message.content, calls, choice.finish_reason
    content, calls, finish = None, {}, None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        delta = chunk.choices[0].delta
        content = (content or "") + delta.content if delta.content else content
        for c in delta.tool_calls or []:   # a call's name opens it, its arguments follow as written
            name, arguments = calls.get(c.index, (None, ""))
            calls[c.index] = (name or c.function.name, arguments + (c.function.arguments or ""))
        finish = chunk.choices[0].finish_reason or finish
    return content or None, [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_cut_by_max_tokens_is_a_call_with_its_arguments_so_far(qwen_chat_tokenizer, stream):
    """A tool call cut off by max_tokens came back as answer text holding the raw markup
    ('<tool_call>\\n<function=get_weather>...'), finish_reason "length", no tool_calls: openai-agents took
    it for the final answer. OpenAI returns the call, its arguments truncated, finish_reason "length"."""
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply=XML_CALL)
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        content, calls, finish = _cut(client, _words_until(XML_CALL, "York"), stream)
        assert (content, calls, finish) == (None, [("get_weather", '{"city": "New York')], "length")
        content, calls, finish = _cut(client, _words_until(XML_CALL, "<parameter=days>\n3"), stream)
        assert (content, calls, finish) == (None, [("get_weather", '{"city": "New York City", "days": 3')], "length")
        # only the closing marker was cut: the whole call
        content, calls, finish = _cut(client, _words_until(XML_CALL, "</function>\n"), stream)
        assert (content, calls, finish) == (None, [("get_weather", '{"city": "New York City", "days": 3}')], "length")
        # a forced call too (its opening is in the prompt)
        backend.reply = XML_CALL.split("<tool_call>\n", 1)[1]
        content, calls, finish = _cut(client, _words_until(backend.reply, "York"), stream, tool_choice="required")
        assert (content, calls, finish) == (None, [("get_weather", '{"city": "New York')], "length")
        # what names no offered tool is not known to be a call: it stays text, as before
        backend.reply = "done\n</think>\n\n<tool_call>\n<function=launch_rockets>\n<parameter=when> now </parameter>"
        content, calls, finish = _cut(client, 3, stream)
        assert calls == [] and content.startswith("<tool_call>\n<function=launch_rockets>") and finish == "length"


def test_a_json_style_call_cut_by_max_tokens(demo_tokenizer):
    """The demo model's syntax (JSON in <tool_call>): the arguments so far are the JSON text written."""
    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "New York City", "days": 3}}\n </tool_call>'
    backend = FakeBackend(tokenizer=demo_tokenizer, reply=reply)
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        for stream in (False, True):
            assert _cut(client, _words_until(reply, '"New'), stream) == (None, [("get_weather", '{"city": "New')], "length")
            assert _cut(client, _words_until(reply, "3}}\n"), stream) == \
                (None, [("get_weather", '{"city": "New York City", "days": 3}')], "length")


def test_a_call_cut_inside_its_name_is_the_one_offered_tool_that_name_begins(qwen_chat_tokenizer, demo_tokenizer):
    """tool_choice "required" with a small max_tokens cut the call inside its name: the raw markup came back
    as the answer ('<tool_call>\n{"name": "now'), tool_calls null. The grammar keeps a forced name an offered
    one's prefix: the one tool it begins is the call (arguments ""); where two tools begin so, no call is
    known and a forced call's markup is still no answer."""
    clock = {"type": "function", "function": {"name": "now_time", "parameters": {"type": "object", "properties": {}}}}
    weather_days = {"type": "function", "function": {**CITY_DAYS["function"], "name": "get_weather_days"}}
    # the fake backend emits a space-separated word per token: `cut` tokens end inside "get_weath"
    for tokenizer, reply, cut in ((demo_tokenizer, '{"name": "get_weath er", "arguments": {"city": "Oslo"}}', 2),
                                  (qwen_chat_tokenizer, "<function=get_weath er>\n<parameter=city>\nOslo\n</parameter>", 1)):
        backend = FakeBackend(tokenizer=tokenizer, reply=reply)
        with live_server(create_app(backend)) as srv:
            client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
            for stream in (False, True):
                forced = _cut(client, cut, stream, tool_choice="required")
                assert forced == (None, [("get_weather", "")], "length"), tokenizer
                kwargs = dict(model="default", messages=ASK, tools=[CITY_DAYS, weather_days, clock], max_tokens=cut,
                              tool_choice="required")
                ambiguous = client.chat.completions.create(**kwargs).choices[0]
                assert (ambiguous.message.content, ambiguous.message.tool_calls, ambiguous.finish_reason) == \
                    ("", None, "length")


def test_a_cut_call_sent_back_in_the_history_is_read_as_far_as_it_goes(qwen_chat_tokenizer):
    """openai-agents answers a call with unparseable arguments (one max_tokens cut) with a tool error
    and asks again, sending the cut call back: that next turn was a 400 "tool call 'get_weather':
    arguments are not a JSON object (Unterminated string ...)", which ended the agent's run. The OpenAI
    API takes any string there."""
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply="done\n</think>\n\nok")
    cut = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "New Yo'}}
    history = [*ASK, {"role": "assistant", "tool_calls": [cut]},
               {"role": "tool", "tool_call_id": "call_1", "content": "An error occurred while running the tool. "
                "Please try again. Error: Invalid JSON input for tool get_weather: {\"city\": \"New Yo"}]
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(model="default", messages=history, tools=[CITY_DAYS], max_tokens=8)
        assert reply.choices[0].message.content == "ok"
        assert "<function=get_weather>\n<parameter=city>\nNew Yo\n</parameter>" in backend.encoded[-1]
        for garbage in ("{not json", "[1, 2]"):   # no JSON object at all: still a 400
            bad = {**cut, "function": {"name": "get_weather", "arguments": garbage}}
            with pytest.raises(openai.BadRequestError):
                client.chat.completions.create(model="default", messages=[*ASK, {"role": "assistant", "tool_calls": [bad]},
                                                                          history[2]], tools=[CITY_DAYS], max_tokens=8)


def test_a_forced_call_streams_no_content(qwen_chat_tokenizer):
    """A forced call's stream opened with `delta: {"role": "assistant", "content": ""}`: openai-agents
    makes an (empty) assistant message of any content that is not null, so its streamed runs held an
    empty message beside the call that non-streamed runs did not. OpenAI's tool-call streams carry no
    content; text replies still open with "" as OpenAI's do."""
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply=XML_CALL.split("<tool_call>\n", 1)[1])
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        chunks = list(client.chat.completions.create(model="default", messages=ASK, tools=[CITY_DAYS], stream=True,
                                                     tool_choice="required"))
        assert chunks[0].choices[0].delta.role == "assistant"
        assert all(c.choices[0].delta.content is None for c in chunks)
        opened = [tc.function.name for c in chunks for tc in c.choices[0].delta.tool_calls or [] if tc.id]
        assert opened == ["get_weather"]
        backend.reply = "done\n</think>\n\nok"
        chunks = list(client.chat.completions.create(model="default", messages=ASK, tools=[CITY_DAYS], stream=True))
        assert chunks[0].choices[0].delta.content == "" and chunks[-2].choices[0].delta.content == "ok"


def test_the_fields_claude_code_sends_are_accepted(qwen_chat_tokenizer):
    """Claude Code sends `context_management`, `output_config` (effort) and `thinking.display` to models it
    does not know (every alias served here), on /v1/messages?beta=true and count_tokens: each was a 400
    "Unrecognized request argument supplied: context_management", so Claude Code could not run at all."""
    # a context with room for the max_tokens Claude Code asks for (a prompt plus it over the context is a 400)
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply="hmm\n</think>\n\nhello", context_length=65536)
    claude_code = {"model": "claude-sonnet-4-6", "max_tokens": 32000, "stream": True,
                   "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                   "thinking": {"type": "adaptive", "display": "omitted"}, "metadata": {"user_id": "u"},
                   "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
                   "output_config": {"effort": "high"}}
    with live_server(create_app(backend, config=GatewayConfig(model_aliases=("claude-sonnet-4-6",)))) as srv:
        stream = httpx.post(srv.base_url + "/v1/messages?beta=true", json=claude_code,
                            headers={"anthropic-beta": "claude-code-20250219,context-management-2025-06-27"})
        assert stream.status_code == 200, stream.text
        assert '"text_delta","text":"hello"' in stream.text
        counted = httpx.post(srv.base_url + "/v1/messages/count_tokens?beta=true",
                             json={k: v for k, v in claude_code.items() if k not in ("max_tokens", "stream", "metadata")})
        assert counted.status_code == 200 and counted.json()["input_tokens"] > 0, counted.text


def test_anthropic_structured_outputs_are_decoded_against_the_schema():
    """Anthropic's structured outputs (`output_config.format`, the beta's `output_format`) were a 400;
    they are the chat endpoint's json_schema response_format (the same grammar)."""
    backend = FakeBackend()
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        client.chat.completions.create(model="default", messages=ASK, max_tokens=2, response_format={
            "type": "json_schema", "json_schema": {"name": "output", "schema": USER_SCHEMA}})
        expected = backend.calls[-1]["params"].grammar
        claude = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
        shape = {"type": "json_schema", "schema": USER_SCHEMA}
        for field in ({"output_config": {"format": shape}}, {"output_format": shape}):
            claude.messages.create(model="default", max_tokens=2, messages=ASK, extra_body=field)
            assert backend.calls[-1]["params"].grammar == expected


def test_model_list_names_the_aliases_clients_pick_from():
    """Open WebUI and Continue pick a model from /v1/models: it listed only the model's id, never the
    --model-alias names the server was started with, and GET /v1/models/{alias} answered the id."""
    config = GatewayConfig(model_aliases=("qwen3.6", "claude-sonnet-4-6"))
    with live_server(create_app(FakeBackend(), config=config)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list()] == ["/models/fake-model", "qwen3.6", "claude-sonnet-4-6"]
        assert client.models.retrieve("qwen3.6").id == "qwen3.6"


def test_a_base_url_without_v1_or_with_a_trailing_slash_reaches_the_api():
    """A base URL without `/v1` was a 404 on every call, and a trailing slash a 307 that SDKs do not
    follow for a POST (llama.cpp's server answers both)."""
    with live_server(create_app(FakeBackend())) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0)   # no /v1
        assert client.chat.completions.create(model="default", messages=ASK, max_tokens=4).choices[0].message.content
        assert [m.id for m in client.models.list()] == ["/models/fake-model"]
        claude = anthropic.Anthropic(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)   # /v1 twice
        with pytest.raises(anthropic.NotFoundError):   # /v1/v1/messages is not an alias of anything
            claude.messages.create(model="default", messages=ASK, max_tokens=4)
        for path in ("/v1/chat/completions/", "/chat/completions/"):
            response = httpx.post(srv.base_url + path, json={"messages": ASK, "max_tokens": 4})
            assert response.status_code == 200, (path, response.text)
        assert httpx.get(srv.base_url + "/health/").status_code == 200
        assert httpx.get(srv.base_url + "/v1/models/default").json()["id"] == "default"
        assert httpx.get(srv.base_url + "/chat").status_code == 404


def test_openai_hints_a_text_model_cannot_act_on_are_accepted_and_a_refusal_turn_is_text(qwen_chat_tokenizer):
    """`modalities: ["text"]`, `prediction` and `verbosity` (the openai SDK passes them through from
    agents' settings) were 400s on chat completions; an assistant turn sent back as the API returned
    it, with a `refusal` content part, was a 400 "text-only model"."""
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply="done\n</think>\n\nok")
    with live_server(create_app(backend)) as srv:
        client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model="default", max_tokens=4, modalities=["text"], verbosity="low",
            prediction={"type": "content", "content": "ok"},
            messages=[{"role": "user", "content": "say something rude"},
                      {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help with that."}]},
                      {"role": "user", "content": "then say ok"}])
        assert reply.choices[0].message.content == "ok"
        assert "I can't help with that." in backend.encoded[-1]
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="default", max_tokens=4, messages=ASK, modalities=["text", "audio"])


def test_vllm_continue_final_message_and_add_generation_prompt(prefill_server):
    """vLLM's template switches on chat, as clients that prefill through vLLM send them: continue_final_message
    with add_generation_prompt false continues the last assistant message (as `prefix: true`);
    add_generation_prompt true is the default; false alone (no turn to reply in) and both true are 400s."""
    srv, backend = prefill_server
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
    conversation = [{"role": "user", "content": "A cat as JSON"}, {"role": "assistant", "content": PREFILL}]
    reply = client.chat.completions.create(model="default", messages=conversation, max_tokens=16, extra_body={
        "continue_final_message": True, "add_generation_prompt": False})
    assert backend.encoded[-1].endswith("<think>\n\n</think>\n\n" + PREFILL)
    assert reply.choices[0].message.content == CONTINUATION
    client.chat.completions.create(model="default", messages=conversation[:1], max_tokens=16,
                                   extra_body={"add_generation_prompt": True, "continue_final_message": False})
    assert backend.encoded[-1].endswith("<|im_start|>assistant\n<think>\n")

    def refused(messages: list[dict], **extra) -> dict:
        response = httpx.post(srv.base_url + "/v1/chat/completions", json={"messages": messages, **extra})
        assert response.status_code == 400, response.text
        return response.json()["error"]

    assert refused(conversation[:1], add_generation_prompt=False)["param"] == "add_generation_prompt"
    assert refused(conversation, continue_final_message=True, add_generation_prompt=True)["code"] == \
        "conflicting_constraints"
    assert refused(conversation[:1], continue_final_message=True)["code"] == "invalid_prefix"
