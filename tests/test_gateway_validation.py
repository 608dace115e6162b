"""Every bad input gets an OpenAI error object with the right status: never 422, 500 or a traceback."""

from __future__ import annotations

import httpx
import openai
import pytest

from gateway.config import GatewayConfig
from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server

OK = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@pytest.fixture(scope="module")
def server():
    backend = FakeBackend(context_length=200)
    with live_server(create_app(backend, config=GatewayConfig(max_body_bytes=64 * 1024, max_stop_sequences=4))) as srv:
        srv.backend = backend
        yield srv


def assert_error(response: httpx.Response, status: int, param: str | None = "__any__", code: str | None = "__any__") -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str)
    assert "Traceback" not in response.text
    if param != "__any__":
        assert error["param"] == param
    if code != "__any__":
        assert error["code"] == code
    return error


REJECTED_CHAT_FIELDS = [
    ({"n": 9}, "n"),                                   # over the server's max_choices (8)
    ({"n": 0}, "n"),
    ({"logit_bias": {"42": 101}}, "logit_bias.42"),
    ({"logit_bias": {"a": 5}}, "logit_bias"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools.0.function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
     "tools.0.function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]},
     "tools"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools.0.type"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"logprobs": "yes"}, "logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs"),
    # apply_chat_template's own arguments: a client's own Jinja template (it runs on the model's worker
    # thread: nested loops stall every request), or the tools / generation prompt the server sets
    ({"chat_template_kwargs": {"chat_template": "{% for i in range(100000) %}{% endfor %}"}},
     "chat_template_kwargs.chat_template"),
    ({"chat_template_kwargs": {"tools": []}}, "chat_template_kwargs.tools"),
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs.add_generation_prompt"),
    ({"chat_template_kwargs": {"tokenize": True}}, "chat_template_kwargs.tokenize"),
    ({"messages": [{"role": "tool", "content": "42"}]}, "messages.0.tool_call_id"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stop": [""]}, "stop"),
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": 2.5}, "temperature"),
    ({"top_p": -0.1}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -5}, "top_k"),
    ({"min_p": 1.5}, "min_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_completion_tokens": -3}, "max_completion_tokens"),
    ({"max_tokens": "many"}, "max_tokens"),
    ({"seed": -2**63 - 1}, "seed"),
    ({"stream": "yes please"}, "stream"),
    ({"stream_options": {"include_usage": True, "bogus": 1}}, "stream_options.bogus"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}]}, "messages.0.tool_calls"),
    ({"messages": [{"role": "user"}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content.0.text"),
    ({"frobnicate": True}, "frobnicate"),
]


@pytest.mark.parametrize("patch,param", REJECTED_CHAT_FIELDS, ids=[p for _, p in REJECTED_CHAT_FIELDS])
def test_rejected_chat_field(server, patch, param):
    response = httpx.post(server.base_url + "/v1/chat/completions", json={**OK, **patch})
    error = assert_error(response, 400, param=param)
    assert error["type"] == "invalid_request_error"


def test_unknown_field_message_names_it(server):
    error = assert_error(httpx.post(server.base_url + "/v1/chat/completions", json={**OK, "frobnicate": 1}), 400)
    assert "frobnicate" in error["message"] and error["code"] == "unknown_parameter"


@pytest.mark.parametrize("role", ["function", "wizard", "Assistant"])
def test_unknown_role_lists_the_roles(server, role):
    body = {**OK, "messages": [{"role": "user", "content": "hi"}, {"role": role, "content": "x", "name": "f"}]}
    error = assert_error(httpx.post(server.base_url + "/v1/chat/completions", json=body), 400, param="messages.1.role")
    assert repr(role) in error["message"]
    assert all(name in error["message"] for name in ("system", "developer", "user", "assistant", "tool"))


def test_missing_messages(server):
    assert_error(httpx.post(server.base_url + "/v1/chat/completions", json={"max_tokens": 1}), 400, param="messages")


def test_harmless_openai_fields_are_accepted(server):
    body = {**OK, "n": 1, "user": "u-1", "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {},
            "logprobs": False, "tool_choice": "none", "parallel_tool_calls": True, "store": False,
            "metadata": {"k": "v"}, "response_format": {"type": "text"}, "top_k": -1, "stream": False}
    response = httpx.post(server.base_url + "/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert server.backend.calls[-1]["params"].top_k == 0


REJECTED_COMPLETION_FIELDS = [
    ({"prompt": ["a", 1]}, "prompt"),
    ({"prompt": [[1, 2], []]}, "prompt"),
    ({"prompt": [-1]}, "prompt"),
    ({"suffix": "x"}, "suffix"),
    ({"best_of": 9}, "best_of"),
    ({"best_of": 1, "n": 2}, "best_of"),
    ({"best_of": 2, "stream": True}, "best_of"),
    ({"n": 9}, "n"),
    ({"logprobs": 6}, "logprobs"),
    ({"messages": [{"role": "user", "content": "x"}]}, "messages"),
]


@pytest.mark.parametrize("patch,param", REJECTED_COMPLETION_FIELDS, ids=[p for _, p in REJECTED_COMPLETION_FIELDS])
def test_rejected_completion_field(server, patch, param):
    response = httpx.post(server.base_url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1, **patch})
    assert_error(response, 400, param=param)


def test_malformed_json(server):
    response = httpx.post(server.base_url + "/v1/chat/completions", content=b'{"messages": [',
                          headers={"content-type": "application/json"})
    assert_error(response, 400, code="invalid_json")


def test_absurdly_nested_json(server):
    response = httpx.post(server.base_url + "/v1/completions", content=b"[" * 30000 + b"]" * 30000,
                          headers={"content-type": "application/json"})
    assert_error(response, 400, code="invalid_json")


LONE_SURROGATES = [  # JSON escapes a client can send (a UTF-16 string cut in half); not valid Unicode
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "cut \\ud83d"}]}', "messages.0.content"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "stop": ["\\udc00"]}', "stop.0"),
    ("/v1/completions", '{"prompt": "a\\udfffb"}', "prompt"),
    ("/v1/completions", '{"prompt": "hi", "user": "\\ud800"}', "user"),
]


@pytest.mark.parametrize("path,body,param", LONE_SURROGATES, ids=[p for _, _, p in LONE_SURROGATES])
def test_lone_surrogate_is_a_400(server, path, body, param):
    response = httpx.post(server.base_url + path, content=body.encode(), headers={"content-type": "application/json"})
    error = assert_error(response, 400, param=param, code="invalid_json")
    assert "surrogate" in error["message"]


def test_surrogate_pairs_are_fine(server):
    body = '{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}], "max_tokens": 1}'
    response = httpx.post(server.base_url + "/v1/chat/completions", content=body.encode(),
                          headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text


def test_json_that_is_not_an_object(server):
    assert_error(httpx.post(server.base_url + "/v1/completions", json=["prompt"]), 400, code="invalid_json")


def test_non_utf8_body(server):
    response = httpx.post(server.base_url + "/v1/completions", content=b"\xff\xfe\x00{",
                          headers={"content-type": "application/json"})
    assert_error(response, 400, code="invalid_json")


def test_wrong_content_type(server):
    response = httpx.post(server.base_url + "/v1/chat/completions", content=b"messages=hi",
                          headers={"content-type": "application/x-www-form-urlencoded"})
    assert_error(response, 415, code="unsupported_media_type")


def test_body_too_large(server):
    big = {"messages": [{"role": "user", "content": "x" * (70 * 1024)}]}
    assert_error(httpx.post(server.base_url + "/v1/chat/completions", json=big), 413, code="request_too_large")


def test_unknown_model_is_404(server):
    response = httpx.post(server.base_url + "/v1/chat/completions", json={**OK, "model": "gpt-4o"})
    error = assert_error(response, 404, param="model", code="model_not_found")
    assert "gpt-4o" in error["message"]
    assert_error(httpx.get(server.base_url + "/v1/models/gpt-4o"), 404, code="model_not_found")


def test_unknown_engine_names_the_loaded_ones(server):
    response = httpx.post(server.base_url + "/v1/chat/completions", json={**OK, "engine": "warp"})
    error = assert_error(response, 400, param="engine", code="engine_not_loaded")
    assert "raw" in error["message"] and "mtp" in error["message"]
    # known engine name, but not loaded in this server
    response = httpx.post(server.base_url + "/v1/chat/completions", json=OK, headers={"X-Switchyard-Engine": "ddtree"})
    error = assert_error(response, 400, param="engine")
    assert "ddtree" in error["message"] and "raw" in error["message"]
    # an invalid header is an error even when the body field (which wins) is valid
    response = httpx.post(server.base_url + "/v1/chat/completions", json={**OK, "engine": "raw"},
                          headers={"X-Switchyard-Engine": "e]L0"})
    assert_error(response, 400, param="engine", code="engine_not_loaded")


def test_prompt_too_long_from_backend_is_400_even_when_streaming(server):
    response = httpx.post(server.base_url + "/v1/completions", json={"prompt": "y" * 500, "stream": True})
    assert_error(response, 400, code="context_length_exceeded")


def test_unknown_route_is_404(server):
    assert_error(httpx.get(server.base_url + "/v1/nothing-here"), 404)
    assert_error(httpx.post(server.base_url + "/v2/chat/completions", json=OK), 404)


@pytest.mark.parametrize("method,path", [("GET", "/v1/chat/completions"), ("PUT", "/v1/completions"),
                                         ("POST", "/v1/models"), ("DELETE", "/health"), ("POST", "/metrics")])
def test_wrong_method_is_405(server, method, path):
    response = httpx.request(method, server.base_url + path)
    error = assert_error(response, 405, code="method_not_allowed")
    assert method in error["message"]
    assert "allow" in response.headers


def test_openai_client_raises_typed_errors(server):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="default", messages=[{"role": "user", "content": "x"}], n=30)
    assert bad.value.body["param"] == "n"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
