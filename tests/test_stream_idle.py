"""A stream that falls silent after its first event is kept open: a tool call's value that is not text (an object,
a number) goes out once written in full (engines.call_stream), and on a large model a call that writes a big one
takes minutes, longer than proxies' and clients' read timeouts. Every stream_keepalive_seconds of silence sends
an SSE comment (Anthropic's streams: a `ping` event)."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai

from gateway.config import GatewayConfig
from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server

CITY = "San Francisco de la Paz del Norte y del Sur"
PLACE = {"city": CITY}
CALL = f"Checking.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=place>\n{json.dumps(PLACE)}\n" \
       "</parameter>\n</function>\n</tool_call>"
TOOL = {"name": "get_weather", "description": "Current weather in a place",
        "parameters": {"type": "object", "properties": {"place": {"type": "object"}}, "required": ["place"]}}
ASK = [{"role": "user", "content": "Weather in the city?"}]


def _server(qwen_chat_tokenizer):
    # one word a step, 0.25 s each: the place's 12 words are ~3 s of silence, past the clients' 1 s read timeout
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply=CALL, step_seconds=0.25)
    return live_server(create_app(backend, config=GatewayConfig(stream_keepalive_seconds=0.3)))


def test_openai_streams_stay_open_while_a_tool_call_is_written(qwen_chat_tokenizer):
    with _server(qwen_chat_tokenizer) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=1.0)
        stream = client.chat.completions.create(model="default", messages=ASK, stream=True,
                                                tools=[{"type": "function", "function": TOOL}])
        calls = [call for chunk in stream if chunk.choices for call in chunk.choices[0].delta.tool_calls or ()]
        assert calls[0].function.name == "get_weather"
        assert json.loads("".join(c.function.arguments for c in calls)) == {"place": PLACE}

        with httpx.stream("POST", server.base_url + "/v1/chat/completions", timeout=10, json={
                "model": "default", "stream": True, "messages": ASK, "tools": [{"type": "function", "function": TOOL}]
        }) as response:
            lines = [line for line in response.iter_lines() if line]
    first = next(i for i, line in enumerate(lines) if line.startswith("data:"))
    place = next(i for i, line in enumerate(lines) if "tool_calls" in line and "San Francisco" in line)
    assert lines[first:place].count(": keep-alive") >= 3   # between the first event and the place
    assert lines[-1] == "data: [DONE]"


def test_anthropic_streams_ping_while_a_tool_call_is_written(qwen_chat_tokenizer):
    with _server(qwen_chat_tokenizer) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0, timeout=1.0)
        tool = {"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["parameters"]}
        with client.messages.stream(model="default", max_tokens=200, messages=ASK, tools=[tool]) as stream:
            message = stream.get_final_message()
        uses = [block for block in message.content if block.type == "tool_use"]
        assert [(u.name, u.input) for u in uses] == [("get_weather", {"place": PLACE})]

        with httpx.stream("POST", server.base_url + "/v1/messages", timeout=10, json={
                "model": "default", "stream": True, "max_tokens": 200, "messages": ASK, "tools": [tool]}) as response:
            lines = [line for line in response.iter_lines() if line]
    start = lines.index("event: message_start")
    place = next(i for i, line in enumerate(lines) if "San Francisco" in line)
    assert lines[start:place].count("event: ping") >= 3 and ": keep-alive" not in lines[start:]
