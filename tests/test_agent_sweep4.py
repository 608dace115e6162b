"""A fourth agent sweep: shapes Codex CLI, Claude Code and the OpenAI / Anthropic SDKs send that were refused
(or accepted when they should not be). Each test is a gap the sweep found, reproduced with the SDKs or httpx."""

from __future__ import annotations

import anthropic
import pytest

from tests.agent_sweeps import WEATHER, srv  # noqa: F401 - srv is the shared fixture
from tests.agent_sweeps import openai_client as _openai
from tests.agent_sweeps import post as _post

CLOCK = {"type": "function", "name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+Hello, world!\n*** End Patch"
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch.",
               "format": {"type": "text"}}
PATCH_CALL = (f"Editing.\n</think>\n\n<tool_call>\n<function=apply_patch>\n<parameter=input>\n{PATCH}\n</parameter>\n"
              "</function>\n</tool_call>")


def test_responses_take_a_refusal_part_back_as_text(srv):
    """An assistant message sent back with the `refusal` content part the API returned was a 400 on
    /v1/responses (chat completions reads it as the turn's text): now it is that text too."""
    reply = _openai(srv).responses.create(model="default", input=[
        {"role": "user", "content": "say something rude"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "refusal", "refusal": "I can't help with that."}]},
        {"role": "user", "content": "then say hi"}])
    assert reply.output_text == "It is sunny."
    assert "I can't help with that." in srv.backend.encoded[-1]


def test_allowed_tools_offers_only_the_allowed_subset(srv):
    """tool_choice {"type": "allowed_tools", "mode", "tools"} (Responses) and {"type": "allowed_tools",
    "allowed_tools": {...}} (chat) were 400s: the model is now offered only the allowed tools, and mode
    "required" forces a call of one of them."""
    client = _openai(srv)
    for mode, forced in (("auto", "auto"), ("required", "required")):
        client.responses.create(model="default", input="Weather in Paris?", tools=[WEATHER, CLOCK], tool_choice={
            "type": "allowed_tools", "mode": mode, "tools": [{"type": "function", "name": "get_weather"}]})
        chat = srv.backend.chats[-1]
        assert [t["function"]["name"] for t in chat["tools"]] == ["get_weather"] and chat["tool_choice"] == forced
        client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
                   for t in (WEATHER, CLOCK)],
            tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": [
                {"type": "function", "function": {"name": "get_time"}}]}})
        chat = srv.backend.chats[-1]
        assert [t["function"]["name"] for t in chat["tools"]] == ["get_time"] and chat["tool_choice"] == forced
    unknown = _post(srv, "/v1/responses", {"input": "hi", "tools": [WEATHER], "tool_choice": {
        "type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "nope"}]}})
    assert unknown.status_code == 400, unknown.text
    assert unknown.json()["error"]["param"] == "tool_choice" and "'nope'" in unknown.json()["error"]["message"]


def test_custom_text_tools_call_and_come_back(srv):
    """Codex sends apply_patch as a `custom` tool (freeform text input) for some models: it was refused.
    A text-format custom tool is offered to the model as a tool taking one string, its call comes back as a
    custom_tool_call item with the text as `input` (unstreamed and streamed), and custom_tool_call /
    custom_tool_call_output items in the history render as the call and its result."""
    srv.backend.reply = PATCH_CALL
    client = _openai(srv)
    response = client.responses.create(model="default", input="Add hello.txt", tools=[APPLY_PATCH, WEATHER])
    offered = srv.backend.chats[-1]["tools"][0]["function"]
    assert offered["name"] == "apply_patch" and offered["parameters"]["properties"] == {"input": {"type": "string"}}
    call = response.output[-1]
    assert (call.type, call.name, call.input) == ("custom_tool_call", "apply_patch", PATCH)
    assert response.tools[0].type == "custom"
    events = list(client.responses.create(model="default", input="Add hello.txt", tools=[APPLY_PATCH], stream=True))
    kinds = [e.type for e in events]
    assert "response.custom_tool_call_input.delta" in kinds and "response.function_call_arguments.delta" not in kinds
    done = next(e for e in events if e.type == "response.custom_tool_call_input.done")
    assert done.input == PATCH and events[-1].response.output[-1].input == PATCH
    added = next(e for e in events if e.type == "response.output_item.added" and e.item.type == "custom_tool_call")
    assert added.item.name == "apply_patch" and added.item.input == ""

    srv.backend.reply = "Done.\n</think>\n\nAdded hello.txt."
    follow = client.responses.create(model="default", tools=[APPLY_PATCH], input=[
        {"role": "user", "content": "Add hello.txt"},
        {"type": "custom_tool_call", "call_id": call.call_id, "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Success. Updated: A hello.txt"}])
    assert follow.output_text == "Added hello.txt."
    prompt = srv.backend.encoded[-1]
    assert f"<function=apply_patch>\n<parameter=input>\n{PATCH}\n</parameter>" in prompt
    assert "<tool_response>\nSuccess. Updated: A hello.txt\n</tool_response>" in prompt

    forced = client.responses.create(model="default", input="Add hello.txt", tools=[APPLY_PATCH, WEATHER],
                                     tool_choice={"type": "custom", "name": "apply_patch"})
    assert srv.backend.chats[-1]["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}
    assert forced.tool_choice.type == "custom"


def test_grammar_custom_tools_and_local_shell_say_why(srv):
    """A custom tool whose input must follow a grammar is refused with the reason (the grammar cannot be
    honoured while the model may also answer in text), as local_shell is (no hosted tools)."""
    grammar = {**APPLY_PATCH, "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}
    response = _post(srv, "/v1/responses", {"input": "hi", "tools": [grammar]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "tools.0.format" and "grammar" in error["message"], error
    shell = _post(srv, "/v1/responses", {"input": "hi", "tools": [{"type": "local_shell"}]})
    assert shell.status_code == 400 and "local_shell" in shell.json()["error"]["message"]


def test_responses_include_values_are_checked(srv):
    """Unknown `include` values were accepted silently; OpenAI answers them with a 400 naming the value.
    The documented ones (Codex sends reasoning.encrypted_content with store false) are accepted."""
    documented = ["reasoning.encrypted_content", "message.output_text.logprobs", "file_search_call.results",
                  "web_search_call.action.sources", "message.input_image.image_url"]
    ok = _post(srv, "/v1/responses", {"input": "hi", "include": documented, "store": False})
    assert ok.status_code == 200, ok.text
    bad = _post(srv, "/v1/responses", {"input": "hi", "include": ["reasoning.encrypted_content", "output.everything"]})
    assert bad.status_code == 400, bad.text
    error = bad.json()["error"]
    assert error["type"] == "invalid_request_error" and "'output.everything'" in error["message"]
    assert error["param"] == "include.1"


def test_chat_audio_null_and_web_search_options(srv):
    """`audio: null` (clients that write out every optional field) was an unknown parameter, and so was
    `web_search_options`: null is now accepted; a search request or an audio output is a 400 naming the
    parameter, as OpenAI answers a model without them."""
    ask = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    ok = _post(srv, "/v1/chat/completions", {**ask, "audio": None, "web_search_options": None, "modalities": ["text"]})
    assert ok.status_code == 200, ok.text
    for name, value in (("web_search_options", {"search_context_size": "low"}),
                        ("audio", {"voice": "alloy", "format": "wav"})):
        bad = _post(srv, "/v1/chat/completions", {**ask, name: value})
        assert bad.status_code == 400, bad.text
        error = bad.json()["error"]
        assert error["param"] == name and error["code"] == "unsupported_parameter", error


def test_messages_prefill_with_trailing_whitespace_and_a_bare_tool_result(srv):
    """Anthropic refuses a prefill ending in whitespace ("final assistant content cannot end with trailing
    whitespace"), which was accepted; a conversation opening with a tool_result that answers no tool_use was a
    400 quoting the chat template ("No user query found"). Both are Anthropic-style invalid_request_errors."""
    claude = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(model="default", max_tokens=8, messages=[
            {"role": "user", "content": "Count to three."}, {"role": "assistant", "content": "One, two, "}])
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    assert "trailing whitespace" in bad.value.body["error"]["message"]
    fine = claude.messages.create(model="default", max_tokens=8, messages=[
        {"role": "user", "content": "Count to three."}, {"role": "assistant", "content": "One, two,"}])
    assert fine.content[-1].type == "text"

    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}]}
    for messages in ([result], [{"role": "user", "content": "Weather?"},
                                {"role": "assistant", "content": "Let me look."}, result]):
        with pytest.raises(anthropic.BadRequestError) as bad:
            claude.messages.create(model="default", max_tokens=8, messages=messages)
        error = bad.value.body["error"]
        assert error["type"] == "invalid_request_error" and "toolu_1" in error["message"], error
        assert "No user query" not in error["message"] and "tool_use" in error["message"]
