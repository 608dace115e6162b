"""The Anthropic Messages API (POST /v1/messages) with the official anthropic SDK and a raw
Claude-Code-shaped request, and the OpenAI Responses API (POST /v1/responses) with the openai SDK:
text, thinking/reasoning, tools and tool results, streaming events, errors in each API's own shape,
and the same auth, routing and metrics as chat completions."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from gateway.config import GatewayConfig
from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server
from tests.test_agent_api import CALL, THOUGHT

KEY = "sk-test-0123456789abcdef"
TOOL = {"name": "get_weather", "description": "Current weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                         "required": ["city"]}}


@pytest.fixture
def server(qwen_chat_tokenizer):
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply=f"{THOUGHT}\n</think>\n\nIt is sunny.")
    config = GatewayConfig(api_keys=(KEY,), model_aliases=("sonnet-local",))
    with live_server(create_app(backend, config=config)) as srv:
        srv.backend = backend
        yield srv


def _anthropic(srv) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.base_url, api_key=KEY, max_retries=0)


def test_messages_text_and_thinking(server):
    message = _anthropic(server).messages.create(
        model="sonnet-local", max_tokens=64, system="Be brief.",
        messages=[{"role": "user", "content": "Weather in Paris?"}])
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == THOUGHT + "\n" and message.content[1].text == "It is sunny."
    assert message.stop_reason == "end_turn" and message.role == "assistant"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    prompt = server.backend.encoded[-1]
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>") and server.backend.calls[-1]["params"].max_tokens == 64


def test_messages_tool_use_round_trip_and_stream(server):
    backend = server.backend
    backend.reply = f"{THOUGHT}\n</think>\n\n{CALL}"
    client = _anthropic(server)
    message = client.messages.create(model="sonnet-local", max_tokens=64, tools=[TOOL],
                                     messages=[{"role": "user", "content": "Weather in Paris?"}])
    assert message.stop_reason == "tool_use"
    tool_use = message.content[-1]
    assert tool_use.type == "tool_use" and tool_use.name == "get_weather" and tool_use.input == {"city": "Paris", "days": 3}
    # the SDK's stream helper accumulates the events into the same message
    with client.messages.stream(model="sonnet-local", max_tokens=64, tools=[TOOL],
                                messages=[{"role": "user", "content": "Weather in Paris?"}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_delta" in kinds
    assert [b.type for b in final.content] == ["thinking", "tool_use"]
    assert final.content[1].input == {"city": "Paris", "days": 3} and final.stop_reason == "tool_use"
    # the tool result goes back; the history renders through the template
    backend.reply = "ok\n</think>\n\nSunny, 18C."
    answer = client.messages.create(model="sonnet-local", max_tokens=64, tools=[TOOL], messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "need it", "signature": ""},
                                          {"type": "tool_use", "id": tool_use.id, "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "18C"}]}])
    assert answer.content[-1].text == "Sunny, 18C."
    prompt = backend.encoded[-1]
    assert "<function=get_weather>\n<parameter=city>\nParis" in prompt and "<tool_response>\n18C\n</tool_response>" in prompt


def test_claude_code_shaped_request_with_raw_httpx(server):
    """What Claude Code sends: system as blocks with cache_control, x-api-key, anthropic-version,
    thinking enabled with a budget, tool_choice, metadata; streamed."""
    body = {"model": "sonnet-local", "max_tokens": 128, "stream": True,
            "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "List files",
                                                       "cache_control": {"type": "ephemeral"}}]}],
            "tools": [TOOL], "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 1024},
            "metadata": {"user_id": "u1"}, "temperature": 1}
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14"}
    with httpx.stream("POST", server.base_url + "/v1/messages", json=body, headers=headers) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-switchyard-engine"] in ("raw", "mtp")
        lines = [line for line in response.iter_lines() if line]
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    datas = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert [d["type"] for d in datas] == events
    assert any(d.get("delta", {}).get("type") == "thinking_delta" for d in datas)
    assert server.backend.chats[-1]["template_kwargs"] == {"enable_thinking": True}


def test_messages_errors_are_anthropic_shaped(server):
    client = _anthropic(server)
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model="sonnet-local", max_tokens=0, messages=[{"role": "user", "content": "x"}])
    assert bad.value.body["type"] == "error" and bad.value.body["error"]["type"] == "invalid_request_error"
    response = httpx.post(server.base_url + "/v1/messages", headers={"x-api-key": KEY}, json={
        "model": "sonnet-local", "max_tokens": 8,
        "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "x"}}]}]})
    assert response.status_code == 400 and "not supported" in response.json()["error"]["message"]
    bad_tool = {**TOOL, "input_schema": {"type": "array"}}
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="sonnet-local", max_tokens=8, tools=[bad_tool],
                               messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="opus-unknown", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server.base_url, api_key="wrong", max_retries=0).messages.create(
            model="sonnet-local", max_tokens=8, messages=[{"role": "user", "content": "x"}])


def test_messages_unsupported_tools_and_tool_result_images_say_why(server):
    """Claude Code sends server tools (web search) and images inside tool results (reading a .png):
    the 400 says they are not supported, not which pydantic field of which union member failed."""
    def post(**patch):
        body = {"model": "sonnet-local", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], **patch}
        return httpx.post(server.base_url + "/v1/messages", headers={"x-api-key": KEY}, json=body)

    response = post(tools=[TOOL, {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}])
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "web_search_20250305" in message and "not supported" in message
    for patch in ({"tools": [{**TOOL, "type": "custom"}]}, {"tools": [TOOL]}):   # client tools, type optional
        assert post(**patch).status_code == 200
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    response = post(messages=[
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [image]}]}])
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "'image'" in message and "not supported" in message and "text-only" in message


def test_messages_stop_sequence_is_reported(server):
    """Anthropic says which stop sequence ended the message: stop_reason "stop_sequence" and the string,
    in the message and in the stream's message_delta; an ordinary end stays "end_turn" with null."""
    client = _anthropic(server)
    kwargs = {"model": "sonnet-local", "max_tokens": 64, "messages": [{"role": "user", "content": "Weather?"}]}
    message = client.messages.create(stop_sequences=["never", "sunny"], **kwargs)
    assert message.content[-1].text == "It is "
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "sunny")
    with client.messages.stream(stop_sequences=["sunny"], **kwargs) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "sunny")
    message = client.messages.create(stop_sequences=["never"], **kwargs)
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)


def _openai(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url + "/v1", api_key=KEY, max_retries=0)


def test_responses_text_and_reasoning(server):
    response = _openai(server).responses.create(model="default", instructions="Be brief.", input="Weather?",
                                                max_output_tokens=64, reasoning={"effort": "high"})
    assert response.status == "completed" and response.output_text == "It is sunny."
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message"]
    assert response.output[0].content[0].text == THOUGHT + "\n"
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert server.backend.encoded[-1].startswith("<|im_start|>system\nBe brief.")


def test_responses_function_calls_stream_and_round_trip(server):
    backend = server.backend
    backend.reply = f"{THOUGHT}\n</think>\n\n{CALL}"
    tool = {"type": "function", "name": "get_weather", "parameters": TOOL["input_schema"]}
    client = _openai(server)
    response = client.responses.create(model="default", input="Weather in Paris?", tools=[tool])
    call = response.output[-1]
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris", "days": 3}
    events = list(client.responses.create(model="default", input="Weather in Paris?", tools=[tool], stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.reasoning_text.delta" in kinds and "response.function_call_arguments.done" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))   # from 0, as OpenAI's
    done = events[-1].response
    assert done.output[-1].type == "function_call" and json.loads(done.output[-1].arguments)["city"] == "Paris"
    backend.reply = "ok\n</think>\n\nSunny."
    follow = client.responses.create(model="default", tools=[tool], input=[
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": "get_weather", "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "18C"}])
    assert follow.output_text == "Sunny."
    assert "<tool_response>\n18C\n</tool_response>" in backend.encoded[-1]


def test_responses_unsupported_input_items_say_why(server):
    """An input item this stateless server cannot take (item_reference points at stored items; hosted
    tools' calls) gets a 400 naming its type and the supported ones, not pydantic's discriminator text."""
    user = {"role": "user", "content": "hi"}
    for item in ({"type": "item_reference", "id": "msg_1"},
                 {"type": "web_search_call", "id": "ws_1", "status": "completed"}):
        response = httpx.post(server.base_url + "/v1/responses", headers={"authorization": f"Bearer {KEY}"},
                              json={"model": "sonnet-local", "input": [user, item]})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "input.1" and repr(item["type"]) in error["message"]
        assert "not supported" in error["message"] and "_item_kind" not in error["message"]


def test_responses_required_tool_choice_without_tools_is_a_400(server):
    """As on chat completions (and OpenAI's Responses API): a forced call with nothing to call is refused,
    not silently answered as plain text."""
    response = httpx.post(server.base_url + "/v1/responses", headers={"authorization": f"Bearer {KEY}"},
                          json={"model": "sonnet-local", "input": "hi", "tool_choice": "required"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "tool_choice"
    fine = httpx.post(server.base_url + "/v1/responses", headers={"authorization": f"Bearer {KEY}"},
                      json={"model": "sonnet-local", "input": "hi", "tool_choice": "auto"})
    assert fine.status_code == 200, fine.text


def test_responses_structured_output_and_refusals(server):
    client = _openai(server)
    client.responses.create(model="default", input="Give JSON", text={"format": {
        "type": "json_schema", "name": "answer", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}})
    assert server.backend.calls[-1]["params"].grammar is not None
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="default", input="x", previous_response_id="resp_1")
    assert bad.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="default", input="x", tools=[{"type": "web_search"}])


def test_new_endpoints_share_the_metrics(server):
    _anthropic(server).messages.create(model="sonnet-local", max_tokens=8,
                                       messages=[{"role": "user", "content": "x"}])
    _openai(server).responses.create(model="default", input="x", max_output_tokens=8)
    text = httpx.get(server.base_url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    for endpoint in ("messages", "responses"):
        assert any(f'endpoint="{endpoint}"' in line and 'status="200"' in line and not line.endswith(" 0.0")
                   for line in text.splitlines() if line.startswith("switchyard_requests_total"))


def test_instructions_and_developer_messages_become_one_system_message(server):
    """Codex-style input: `instructions` plus a developer item later on; Qwen's template accepts a
    system message only first, so they are joined, in order, into one."""
    server.backend.reply = "ok\n</think>\n\nDone."
    response = _openai(server).responses.create(model="default", instructions="Be brief.", input=[
        {"role": "user", "content": "List files"},
        {"role": "developer", "content": "The sandbox is read-only."},
        {"role": "user", "content": "Now count them"}])
    assert response.output_text == "Done."
    prompt = server.backend.encoded[-1]
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\nThe sandbox is read-only.<|im_end|>")
    assert prompt.count("<|im_start|>system") == 1


def test_count_tokens_as_claude_code_calls_it(server):
    client = _anthropic(server)
    generations = len(server.backend.calls)
    count = client.messages.count_tokens(model="sonnet-local", system="Be brief.", tools=[TOOL],
                                         messages=[{"role": "user", "content": "Weather in Paris?"}])
    assert count.input_tokens == len(server.backend.encoded[-1])   # the fake tokenizer: one id per character
    assert "<tools>" in server.backend.encoded[-1]
    assert len(server.backend.calls) == generations                 # nothing was generated
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model="sonnet-local", messages=[])
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="nope", messages=[{"role": "user", "content": "x"}])


def test_the_item_max_output_tokens_cut_is_incomplete(server):
    """A response cut by max_output_tokens said "incomplete" while its cut message item said "completed"
    (OpenAI marks that item incomplete too); streamed, the item's done event and the final body agree."""
    client = _openai(server)
    response = client.responses.create(model="default", input="Weather?", max_output_tokens=2)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert [item.status for item in response.output][-1] == "incomplete"
    assert all(item.status == "completed" for item in response.output[:-1])
    events = list(client.responses.create(model="default", input="Weather?", max_output_tokens=2, stream=True))
    assert events[-1].type == "response.incomplete"
    done_items = [e.item for e in events if e.type == "response.output_item.done"]
    assert done_items[-1].status == "incomplete" and events[-1].response.output[-1].status == "incomplete"
    full = client.responses.create(model="default", input="Weather?", max_output_tokens=64)
    assert full.status == "completed" and {item.status for item in full.output} == {"completed"}
