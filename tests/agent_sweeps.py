"""What the agent sweeps' tests share: a served gateway on the fake backend with Qwen3.6's chat template
(tools, thinking), the clients that reach it, and a tool they offer."""

from __future__ import annotations

import httpx
import openai
import pytest

from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server

WEATHER = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
def srv(qwen_chat_tokenizer):
    backend = FakeBackend(tokenizer=qwen_chat_tokenizer, reply="Fine.\n</think>\n\nIt is sunny.")
    with live_server(create_app(backend)) as server:
        server.backend = backend
        yield server


def openai_client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + path, json={"model": "default", **body})
