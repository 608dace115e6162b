"""A tenth agent sweep: requests as the openai and anthropic SDKs (and the frameworks on them: LangChain's
batch, Claude Code's resent histories) send them, against a served gateway. Each test is a gap the sweep found."""

from __future__ import annotations

import json

import httpx

from tests.agent_sweeps import openai_client as _openai
from tests.agent_sweeps import post as _post
from tests.agent_sweeps import srv  # noqa: F401 - srv is the shared fixture

PROSE = "The quick brown fox"


def _completion_chunks(response: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


def test_several_prompts_are_one_choice_each_times_n(srv):
    """LangChain's OpenAI LLM batches prompts into one /v1/completions request (`prompt` a list of strings);
    here any list but one string was a 400 "prompt must be a string", so `llm.batch([...])` and
    `llm.generate([...])` failed. OpenAI answers one choice per prompt (times n), choice index
    prompt_index * n + i, and counts every prompt's tokens once in usage."""
    srv.backend.reply = PROSE
    prompts = ["Once upon a time", "def add(a, b):"]
    reply = _openai(srv).completions.create(model="default", prompt=prompts, n=2, max_tokens=3, seed=7)
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert [c.text for c in reply.choices] == ["The quick brown"] * 4
    calls = srv.backend.calls[-4:]
    assert [call["prompt_ids"] for call in calls] == [[ord(c) for c in p] for p in prompts for _ in range(2)]
    # a prompt's choices in the batch are the ones it gets alone: seed + i within each prompt
    assert [call["params"].seed for call in calls] == [7, 8, 7, 8]
    assert reply.usage.prompt_tokens == sum(map(len, prompts))
    assert reply.usage.completion_tokens == 4 * 3
    assert reply.usage.total_tokens == sum(map(len, prompts)) + 12


def test_several_prompts_stream_each_choice_under_its_index(srv):
    """The same batch streamed: each choice's chunks carry its own index, and the usage chunk sums the prompts."""
    srv.backend.reply = PROSE
    prompts = ["ab", "cde", "f"]
    response = _post(srv, "/v1/completions", {"prompt": prompts, "max_tokens": 2, "stream": True,
                                              "stream_options": {"include_usage": True}})
    assert response.status_code == 200, response.text
    chunks = _completion_chunks(response)
    texts: dict[int, str] = {}
    for chunk in chunks[:-1]:
        for choice in chunk["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    assert texts == {0: "The quick", 1: "The quick", 2: "The quick"}
    assert chunks[-1]["usage"]["prompt_tokens"] == 6 and chunks[-1]["usage"]["completion_tokens"] == 6


def test_token_id_prompts_are_generated_from_as_given(srv):
    """A prompt of token ids (one list of ints, or a list of such lists, as the openai SDK types `prompt`)
    runs from exactly those ids; an id past the vocabulary is a 400 naming it, not an engine failure."""
    srv.backend.reply = PROSE
    reply = _openai(srv).completions.create(model="default", prompt=[[5, 6, 7], [8, 9]], max_tokens=1)
    assert [c.index for c in reply.choices] == [0, 1]
    assert [call["prompt_ids"] for call in srv.backend.calls[-2:]] == [[5, 6, 7], [8, 9]]
    assert reply.usage.prompt_tokens == 5
    one = _post(srv, "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 1})
    assert one.status_code == 200 and len(one.json()["choices"]) == 1, one.text
    assert srv.backend.calls[-1]["prompt_ids"] == [5, 6, 7]
    outside = _post(srv, "/v1/completions", {"prompt": [[5], [10**6]], "max_tokens": 1})
    assert outside.status_code == 400, outside.text
    assert outside.json()["error"]["param"] == "prompt" and "1000000" in outside.json()["error"]["message"]


def test_malformed_or_oversized_prompt_batches_are_clear_400s(srv):
    """A mixed list, an empty one, an empty list of ids inside a batch and more prompts than the server takes
    are 400s that say what a prompt may be: never a 500, nothing generated. (An empty string is a prompt:
    test_agent_sweep11.)"""
    before = len(srv.backend.calls)
    for prompt in (["a", 1], [], [[1], "a"], [[]], [[1], []], [True, False], ["x"] * 33):
        response = _post(srv, "/v1/completions", {"prompt": prompt, "max_tokens": 1})
        assert response.status_code == 400, (prompt, response.text)
        error = response.json()["error"]
        assert error["param"] == "prompt" and error["type"] == "invalid_request_error", (prompt, error)
    assert len(srv.backend.calls) == before


def test_a_batch_with_one_prompt_too_long_fails_before_any_output(srv):
    """Every prompt of a batch is checked against the context before the first one runs, so a batch whose
    second prompt overflows is one context_length_exceeded 400, not a stream cut after the first choice."""
    srv.backend.context_length = 64
    before = len(srv.backend.calls)
    response = _post(srv, "/v1/completions", {"prompt": ["short", "x" * 60], "max_tokens": 10, "stream": True})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert len(srv.backend.calls) == before


ANTHROPIC_WEATHER = {"name": "get_weather", "description": "The weather in a city.", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def _anthropic(server):
    import anthropic

    return anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)


def test_anthropic_tool_input_examples_are_shown_to_the_model(srv):
    """Anthropic's tools take `input_examples` (example inputs the model learns a tool's use from; the
    anthropic SDK's ToolParam has the field). It was an "Unrecognized request argument" 400, so any client
    that documents its tools with examples failed on every request. The examples are now accepted and put
    in the prompt after the tool's description (the one tool field every chat template renders), as JSON;
    count_tokens counts them."""
    tool = {**ANTHROPIC_WEATHER, "input_examples": [{"city": "Paris"}, {"city": "Tōkyō"}]}
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    reply = _anthropic(srv).messages.create(model="default", max_tokens=32, messages=ask, tools=[tool])
    assert reply.stop_reason == "end_turn"
    described = srv.backend.chats[-1]["tools"][0]["function"]["description"]
    assert described == 'The weather in a city.\n\nInput examples:\n{"city": "Paris"}\n{"city": "Tōkyō"}'
    assert "Input examples:" in srv.backend.encoded[-1] and "Tōkyō" in srv.backend.encoded[-1]
    plain = _post(srv, "/v1/messages/count_tokens", {"messages": ask, "tools": [ANTHROPIC_WEATHER]})
    counted = _post(srv, "/v1/messages/count_tokens", {"messages": ask, "tools": [tool]})
    assert counted.status_code == 200, counted.text
    assert counted.json()["input_tokens"] > plain.json()["input_tokens"]
    no_description = {key: value for key, value in tool.items() if key != "description"}
    assert _post(srv, "/v1/messages", {"max_tokens": 8, "messages": ask, "tools": [no_description]}).status_code == 200
    assert srv.backend.chats[-1]["tools"][0]["function"]["description"].startswith("Input examples:\n")
    bad = _post(srv, "/v1/messages", {"max_tokens": 8, "messages": ask, "tools": [{**tool, "input_examples": ["x"]}]})
    assert bad.status_code == 400 and bad.json()["type"] == "error", bad.text


CLAUDE_CODE_HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "The user wants the weather.", "signature": ""},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "Answer it.", "signature": "c2lnbmVk"},
                                      {"type": "text", "text": "It is sunny."}]},
    {"role": "user", "content": "And tomorrow?"},
]


def test_resent_thinking_blocks_with_empty_signatures_are_accepted(srv):
    """Claude Code and the anthropic SDK send a conversation's thinking back as it came: `thinking` blocks whose
    `signature` is "" (this server signs nothing) or a real Claude one, and `redacted_thinking` blocks. On
    /v1/messages (and count_tokens) every turn of such a history is taken, the readable thinking kept. (Already
    so before this sweep: the test keeps it so.)"""
    client = _anthropic(srv)
    reply = client.messages.create(model="default", max_tokens=32, messages=CLAUDE_CODE_HISTORY,
                                   tools=[ANTHROPIC_WEATHER], thinking={"type": "enabled", "budget_tokens": 1024})
    assert reply.content[0].type == "thinking" and reply.content[0].signature == ""
    # the reply's own blocks, sent back as the SDK returns them, are a valid next turn
    follow = [*CLAUDE_CODE_HISTORY, {"role": "assistant", "content": reply.content},
              {"role": "user", "content": "Thanks."}]
    again = client.messages.create(model="default", max_tokens=8, messages=follow, tools=[ANTHROPIC_WEATHER])
    assert again.stop_reason in ("end_turn", "max_tokens")
    assert [m.get("reasoning_content") for m in srv.backend.chats[-1]["messages"] if m["role"] == "assistant"][:2] == \
        ["The user wants the weather.", "Answer it."]
    assert client.messages.count_tokens(model="default", messages=follow, tools=[ANTHROPIC_WEATHER]).input_tokens > 0


def test_litellm_thinking_blocks_on_chat_turns_are_accepted(srv):
    """Claude Code through LiteLLM's proxy to an OpenAI-compatible model: LiteLLM's Anthropic adapter turns each
    assistant turn's thinking into `thinking_blocks` on the chat message (signature "" where Claude gave none,
    redacted blocks as they came) beside `reasoning_content`, and its Message sends `thinking_blocks` back in a
    tool loop. /v1/chat/completions answered "Unrecognized request argument supplied: messages.1.thinking_blocks",
    so the second turn of every such conversation failed. The blocks are accepted; their readable thinking is the
    turn's reasoning where the message has no `reasoning_content` (redacted thinking is left out)."""
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")   # no network at import
    adapters = __import__("pytest").importorskip("litellm.llms.anthropic.messages.adapters.transformation")
    messages = adapters.LiteLLMAnthropicMessagesAdapter().translate_anthropic_messages_to_openai(
        messages=CLAUDE_CODE_HISTORY)
    assert any("thinking_blocks" in m for m in messages)   # what LiteLLM sends
    chat_weather = {"type": "function", "function": {"name": "get_weather", "parameters": ANTHROPIC_WEATHER["input_schema"]}}
    reply = _post(srv, "/v1/chat/completions", {"messages": messages, "tools": [chat_weather], "max_tokens": 8})
    assert reply.status_code == 200, reply.text


def test_thinking_blocks_alone_are_the_turns_reasoning(srv):
    """LiteLLM's Message of a Claude reply, resent with `thinking_blocks` and no `reasoning_content` (the shape the
    test above gets from LiteLLM itself, written out so that it runs where LiteLLM is not installed, as in CI):
    the readable blocks are the turn's reasoning, the redacted one is left out."""
    turn = {"role": "assistant", "content": "It is sunny.", "thinking_blocks": [
        {"type": "thinking", "thinking": "Answer it.", "signature": ""}, {"type": "redacted_thinking", "data": "x"},
        {"type": "thinking", "thinking": "Briefly."}]}
    ask = {"role": "user", "content": "Weather in Paris?"}
    reply = _post(srv, "/v1/chat/completions", {"messages": [ask, turn, {"role": "user", "content": "ok"}],
                                                "max_tokens": 8})
    assert reply.status_code == 200, reply.text
    assert srv.backend.chats[-1]["messages"][1]["reasoning_content"] == "Answer it.\nBriefly."


def test_a_negative_seed_is_a_seed(srv):
    """OpenAI's `seed` is any int64 (its API spec's minimum is -2**63), and llama.cpp's habit of seed -1 reaches
    OpenAI-compatible servers through UIs that keep it; here a negative seed was a 400 "greater than or equal to
    0". It is now a seed like any other: read as its 64-bit two's complement (the generator's seeds are
    unsigned), n choices wrapping past the last one, so each is a valid, reproducible seed."""
    client = _openai(srv)
    reply = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=2, seed=-1, n=2)
    assert len(reply.choices) == 2
    assert [call["params"].seed for call in srv.backend.calls[-2:]] == [2**64 - 1, 0]
    client.completions.create(model="default", prompt="hi", max_tokens=1, seed=-2**63)
    assert srv.backend.calls[-1]["params"].seed == 2**63
    for seed in (-2**63 - 1, 2**63):
        assert _post(srv, "/v1/completions", {"prompt": "hi", "max_tokens": 1, "seed": seed}).status_code == 400


def test_anthropic_tool_fields_that_ask_for_no_server_tool_are_accepted(srv):
    """The anthropic SDK's ToolParam also has `defer_loading` (Anthropic's server-side tool search) and
    `allowed_callers` (calls from its code execution); clients that write such fields out send `false` and
    `["direct"]`, which ask for nothing this server lacks, yet each was an "Unrecognized request argument" 400.
    Those values are accepted; a deferred tool or a code-execution caller is a 400 that says why."""
    client = _anthropic(srv)
    tool = {**ANTHROPIC_WEATHER, "defer_loading": False, "allowed_callers": ["direct"]}
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    assert client.messages.create(model="default", max_tokens=8, messages=ask, tools=[tool]).stop_reason
    assert srv.backend.chats[-1]["tools"][0]["function"]["name"] == "get_weather"
    for field, value, words in (("defer_loading", True, "tool search"),
                                ("allowed_callers", ["code_execution_20250825"], "code execution")):
        refused = _post(srv, "/v1/messages", {"max_tokens": 8, "messages": ask, "tools": [{**tool, field: value}]})
        assert refused.status_code == 400 and words in refused.json()["error"]["message"], refused.text


def test_responses_tool_fields_that_ask_for_no_server_tool_are_accepted(srv):
    """The openai SDK's Responses FunctionToolParam grew `defer_loading` (tool search), `allowed_callers`
    ("direct" / "programmatic") and `output_schema`, as Anthropic's tools did; clients that write them out were
    "Unrecognized request argument" 400s on /v1/responses. `defer_loading: false`, `allowed_callers: ["direct"]`
    and an `output_schema` (the client reads the call's output, not the model) are accepted, the function offered
    as before; a deferred tool or a programmatic caller is a 400 that says why."""
    tool = {"type": "function", "name": "get_weather", "parameters": ANTHROPIC_WEATHER["input_schema"], "strict": False,
            "defer_loading": False, "allowed_callers": ["direct"], "output_schema": {"type": "string"}}
    reply = _openai(srv).responses.create(model="default", input="Weather in Paris?", tools=[tool],
                                          max_output_tokens=16)
    assert reply.status == "completed"
    assert srv.backend.chats[-1]["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "parameters": ANTHROPIC_WEATHER["input_schema"], "strict": False}}]
    custom = {"type": "custom", "name": "apply_patch", "defer_loading": False, "allowed_callers": ["direct"]}
    assert _post(srv, "/v1/responses", {"input": "hi", "tools": [custom]}).status_code == 200
    for field, value, words in (("defer_loading", True, "tool search"),
                                ("allowed_callers", ["programmatic"], "code execution")):
        refused = _post(srv, "/v1/responses", {"input": "hi", "tools": [{**tool, field: value}]})
        assert refused.status_code == 400 and words in refused.json()["error"]["message"], refused.text
