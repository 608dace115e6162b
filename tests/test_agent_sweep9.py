"""A ninth agent sweep: the framework clients users put in front of a local server (the openai SDK's stream and
parse helpers, LangChain, LiteLLM, instructor, pydantic-ai), their requests and reads reproduced with the openai
SDK and httpx against a served gateway. Each test is a gap the sweep found."""

from __future__ import annotations

import json

from tests.agent_sweeps import srv  # noqa: F401 - srv is the shared fixture
from tests.agent_sweeps import openai_client as _openai
from tests.agent_sweeps import post as _post

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}
CHAT_WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}
CALL = ("Checking.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>")
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def test_a_streamed_call_is_finished_in_a_chunk_of_its_own(srv):
    """The last chunk of a streamed tool call carried the call's delta and finish_reason "tool_calls" together.
    The openai SDK's `client.chat.completions.stream()` reads a call as done when a later chunk finishes the
    choice, so `tool_calls.function.arguments.done`, the event that hands a client the whole arguments (and
    a strict tool's `parsed_arguments`), never fired. The finish now comes in a chunk of its own with an
    empty delta, as OpenAI ends every choice, calls and text alike."""
    srv.backend.reply = CALL
    with _openai(srv).chat.completions.stream(model="default", messages=ASK, tools=[CHAT_WEATHER],
                                              tool_choice="required") as stream:
        events = list(stream)
        final = stream.get_final_completion()
    done = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    assert [(e.name, json.loads(e.arguments)) for e in done] == [("get_weather", {"city": "Paris"})]
    assert final.choices[0].finish_reason == "tool_calls"

    for reply in (CALL, "Fine.\n</think>\n\nIt is sunny."):
        srv.backend.reply = reply
        lines = _post(srv, "/v1/chat/completions", {"messages": ASK, "tools": [CHAT_WEATHER], "stream": True})
        chunks = [json.loads(line[6:]) for line in lines.text.splitlines() if line.startswith("data: {")]
        *body, last = [chunk["choices"][0] for chunk in chunks]
        assert last["delta"] == {} and last["finish_reason"] in ("tool_calls", "stop"), last
        assert all(choice["finish_reason"] is None for choice in body)


def test_a_forced_call_with_a_json_response_format_is_the_call(srv):
    """instructor's RESPONSES_TOOLS mode sends its response model both as `text.format` (json_schema) and as the
    one tool that `tool_choice` forces; openai-agents sends an output_type with tool_choice "required" alike.
    OpenAI takes both (the forced call leaves no text for the format to shape); here they were a 400
    "a forced tool call and a JSON response_format cannot both shape the reply", so every such call failed.
    The call is decoded as any forced call, on /v1/responses and chat; the format's schema is still checked."""
    srv.backend.reply = CALL
    body = {"input": [{"role": "user", "content": "Weather in Paris?"}],   # as instructor sent it
            "text": {"format": {"type": "json_schema", "name": "get_weather", "strict": True, "schema": CITY}},
            "tool_choice": {"type": "function", "name": "get_weather"},
            "tools": [{"type": "function", "name": "get_weather", "parameters": CITY}]}
    _post(srv, "/v1/responses", {key: value for key, value in body.items() if key != "text"})
    forced_call_grammar = srv.backend.calls[-1]["params"].grammar   # the call's alone
    reply = _post(srv, "/v1/responses", body)
    assert reply.status_code == 200, reply.text
    call = reply.json()["output"][-1]
    assert (call["type"], call["name"], json.loads(call["arguments"])) == ("function_call", "get_weather",
                                                                           {"city": "Paris"})
    assert srv.backend.calls[-1]["params"].grammar == forced_call_grammar

    fmt = {"type": "json_schema", "json_schema": {"name": "pick", "schema": CITY, "strict": True}}
    chat = _openai(srv).chat.completions.create(model="default", messages=ASK, tools=[CHAT_WEATHER],
                                                tool_choice="required", response_format=fmt)
    assert chat.choices[0].finish_reason == "tool_calls"
    assert chat.choices[0].message.tool_calls[0].function.name == "get_weather"

    unusable = {"type": "object", "minProperties": "x"}
    broken = {**body, "text": {"format": {**body["text"]["format"], "schema": unusable}}}
    refused = _post(srv, "/v1/responses", broken)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_json_schema", refused.text


def test_a_streamed_answer_before_its_calls_ends_where_the_whole_one_does(srv):
    """Qwen writes a blank line between its answer and its calls ("Checking both.\\n\\n<tool_call>..."), and a line
    between two calls. The whole reply leaves that whitespace out of the answer; a stream sent it, so every client
    that joins the deltas (LiteLLM's stream_chunk_builder, LangChain's chunk sum, the openai SDK's stream helper,
    the anthropic SDK's final message) read "Checking both.\\n\\n\\n", and resent it in the history, where the
    template renders it before the calls' own blank line. Streams now hold trailing whitespace back until more
    answer follows, on chat, /v1/responses and /v1/messages."""
    import anthropic

    call = CALL.split("\n\n", 1)[1]
    srv.backend.reply = "Checking.\n</think>\n\nChecking both.\n\n" + call + "\n" + call.replace("Paris", "Rome")
    client = _openai(srv)
    whole = client.chat.completions.create(model="default", messages=ASK, tools=[CHAT_WEATHER]).choices[0].message
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
        model="default", messages=ASK, tools=[CHAT_WEATHER], stream=True) if chunk.choices)
    assert whole.content == streamed == "Checking both." and len(whole.tool_calls) == 2

    flat = {"type": "function", "name": "get_weather", "parameters": CITY}
    with client.responses.stream(model="default", input="Weather?", tools=[flat]) as stream:
        events = list(stream)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == stream.get_final_response().output_text == "Checking both."

    claude = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
    tool = {"name": "get_weather", "input_schema": CITY}
    with claude.messages.stream(model="default", max_tokens=200, messages=ASK, tools=[tool]) as stream:
        text = "".join(stream.text_stream)
    assert text == "Checking both."

    srv.backend.reply = "Checking.\n</think>\n\nNo tool needed.\n\n"   # without calls, the text is kept to its end
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
        model="default", messages=ASK, tools=[CHAT_WEATHER], stream=True) if chunk.choices)
    assert streamed == "No tool needed.\n\n"


def test_the_ai_sdks_anthropic_tool_hints_are_accepted(srv):
    """The AI SDK's Anthropic provider (@ai-sdk/anthropic, what `streamText` with Claude models runs on) marks
    every tool of a streamed request `eager_input_streaming: true` (Anthropic's fine-grained tool streaming),
    and with a known model name sends a tool's `strict`: both were "Unrecognized request argument supplied:
    tools.0.eager_input_streaming" 400s, so every streamed tool request from it failed. Both are accepted (a call
    streams its input in one delta here; `strict` holds no call the model chooses, as a chat function's)."""
    import anthropic

    srv.backend.reply = CALL
    claude = anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0)
    tool = {"name": "get_weather", "input_schema": CITY, "eager_input_streaming": True, "strict": True}
    with claude.messages.stream(model="default", max_tokens=200, messages=ASK, tools=[tool]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].input == {"city": "Paris"}
    assert srv.backend.chats[-1]["tools"][0]["function"]["name"] == "get_weather"


def test_an_item_reference_says_how_the_ai_sdk_sends_the_items(srv):
    """The AI SDK's openai provider (`createOpenAI`, whose default models speak the Responses API) stores nothing
    on its side: from the second step of a tool loop it sends {"type": "item_reference", "id": "fc_..."} for the
    call it made, unless `providerOptions.openai.store` is false. That is a 400 here (nothing is stored), which
    said "send the items themselves" without saying how: every AI SDK tool loop stopped at its second step. The
    400 now names the setting, which makes the SDK send the items (the README says so too)."""
    reply = _post(srv, "/v1/responses", {"input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"type": "item_reference", "id": "fc_68f3"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "input.1" and "store: false" in error["message"], error
    from tests.ops_helpers import REPO

    assert "store: false" in (REPO / "README.md").read_text().split("**Vercel AI SDK**")[1].split("\n- ")[0]
