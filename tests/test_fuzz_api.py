"""Schemathesis against the live server from /openapi.json (fake backend: fast, every operation).

Positive and negative examples per operation: no 5xx, statuses/content types/bodies as documented,
schema-invalid input rejected with a 4xx, every error an OpenAI error object (tests/fuzz_checks.py).
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from gateway.config import GatewayConfig
from gateway.http.app import create_app
from gateway.http.openapi import build_openapi
from tests.fakes import FakeBackend, live_server
from tests.fuzz_checks import CHECKS, fuzz_config

MAX_EXAMPLES = 60


CONFIG = GatewayConfig(max_tokens_limit=64, max_body_bytes=256 * 1024, request_timeout_seconds=30)
APP = create_app(FakeBackend(context_length=10**9), config=CONFIG)  # no context limit: every valid body is served


@pytest.fixture(scope="module")
def fuzz_server():
    with live_server(APP) as server:
        yield server


# The document the server serves at /openapi.json (test_served_schema_is_the_built_one checks they agree).
schema = schemathesis.openapi.from_dict(APP.state.openapi, config=fuzz_config())


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_conforms_to_its_schema(case, fuzz_server):
    case.call_and_validate(base_url=fuzz_server.base_url, checks=CHECKS, timeout=30)


def test_served_schema_is_the_built_one(fuzz_server):
    import httpx

    assert httpx.get(fuzz_server.base_url + "/openapi.json").json() == APP.state.openapi


def test_openapi_document_covers_every_route():
    doc = build_openapi()
    assert doc["openapi"].startswith("3.1")
    assert set(doc["paths"]) == {"/v1/chat/completions", "/v1/completions", "/v1/messages",
                                 "/v1/messages/count_tokens", "/v1/responses", "/v1/responses/input_tokens",
                                 "/v1/models", "/v1/models/{model}",
                                 "/health", "/metrics", "/v1/router/stats", "/admin/reload",
                                 "/api/chat", "/api/generate", "/api/tags", "/api/ps", "/api/show", "/api/version", "/",
                                 "/tokenize", "/detokenize", "/v1/embeddings", "/api/embed", "/api/embeddings"}
    chat = doc["paths"]["/v1/chat/completions"]["post"]
    assert chat["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("ChatCompletionRequest")
    assert {"400", "401", "413", "429", "503", "504"} <= set(chat["responses"])
    assert "messages" in doc["components"]["schemas"]["ChatCompletionRequest"]["properties"]
