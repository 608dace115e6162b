"""Checks shared by the schemathesis runs: the built-in ones we hold the API to, plus ours."""

from __future__ import annotations

import json

from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.http.anthropic_schemas import AnthropicErrorResponse
from gateway.http.ollama_schemas import OllamaChatResponse, OllamaError, OllamaGenerateResponse
from gateway.http.schemas import ErrorResponse, Health


def openai_error_bodies(ctx, response, case) -> bool | None:
    """Every error is an OpenAI error object; an SSE stream is JSON frames (chunks or an error
    object) ending with [DONE]."""
    content_type = response.headers.get("content-type", [""])
    content_type = content_type[0] if isinstance(content_type, list) else content_type
    if response.status_code >= 400:
        if case.path.startswith("/api/"):
            OllamaError.model_validate_json(response.content)
        elif case.path.startswith("/v1/messages"):
            AnthropicErrorResponse.model_validate_json(response.content)
        elif case.path == "/health" and response.status_code == 503:
            health = Health.model_validate_json(response.content)
            assert health.status == "unavailable" and health.error is not None
        elif not (case.path == "/admin/reload" and response.status_code == 422):  # policy errors, documented
            ErrorResponse.model_validate_json(response.content)
        return True
    if content_type.startswith("application/x-ndjson"):
        _ndjson_lines(case.path, response.content.decode())
    elif content_type.startswith("text/event-stream") and case.path in ("/v1/messages", "/v1/responses"):
        _named_events(case.path, response.content.decode())
    elif content_type.startswith("text/event-stream"):
        frames = [line[6:] for line in response.content.decode().splitlines() if line.startswith("data: ")]
        assert frames and frames[-1] == "[DONE]", frames[-3:]
        for frame in frames[:-1]:
            payload = json.loads(frame)
            if "error" in payload:
                ErrorResponse.model_validate(payload)
            else:
                assert payload["object"] in ("chat.completion.chunk", "text_completion"), payload
    return True


# 400s for rules JSON Schema cannot state (a tool_choice naming one of the request's own tools, unique tool
# names, a response schema llguidance compiles, something to answer), documented in /openapi.json's descriptions
SEMANTIC_CODES = ("unknown_tool", "duplicate_tool_name", "conflicting_constraints", "empty_conversation",
                  "invalid_json_schema", "invalid_prefix", "unmatched_tool_result", "invalid_token_id",
                  "invalid_grammar")
SEMANTIC_MESSAGES = ("is not among the tools", "names must be unique", "conversation holds no",
                     "not a usable JSON schema", "an assistant prefix cannot be combined",
                     "answers no tool_use block", "cannot end with trailing whitespace",
                     # Ollama's error object has no `code` either (the rules its bodies reach through the chat
                     # request, and its own: format and think need the chat template)
                     "is not among the", "not a usable", "not a JSON schema", "only one structured output",
                     "need the chat template", "only the last message may be an assistant prefix")


def positive_data_accepted(ctx, response, case) -> bool | None:
    """schemathesis' positive_data_acceptance, except the documented semantic 400s."""
    if response.status_code == 400:
        try:
            body = json.loads(response.content)
        except ValueError:
            body = {}
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and error.get("code") in SEMANTIC_CODES:
            return True
        # Ollama's error is the message itself: {"error": "message"}
        message = str(error.get("message", "")) if isinstance(error, dict) else error if isinstance(error, str) else ""
        if case.path.startswith(("/v1/messages", "/api/")) and any(phrase in message for phrase in SEMANTIC_MESSAGES):
            return True   # Anthropic's and Ollama's error objects have no `code`: the same rules, by their message
    return positive_data_acceptance(ctx, response, case)


def _ndjson_lines(path: str, text: str) -> None:
    """Ollama's streams: one reply object per line, the last one done (or an error line)."""
    reply = OllamaChatResponse if path == "/api/chat" else OllamaGenerateResponse
    lines = [json.loads(line) for line in text.splitlines() if line]
    assert lines, text[:200]
    for line in lines[:-1]:
        assert not reply.model_validate(line).done, line
    if "error" in lines[-1]:
        OllamaError.model_validate(lines[-1])
    else:
        assert reply.model_validate(lines[-1]).done, lines[-1]


def _named_events(path: str, text: str) -> None:
    """Anthropic and Responses streams: `event: NAME` + `data: {"type": NAME, ...}` pairs, no [DONE];
    they end with message_stop / response.completed (or an error event)."""
    names = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
    datas = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    assert names and [d["type"] for d in datas] == names, names[-3:]
    last = names[-1]
    if path == "/v1/messages":
        assert last in ("message_stop", "error"), last
        if last == "error":
            AnthropicErrorResponse.model_validate(datas[-1])
    else:
        assert last in ("response.completed", "response.incomplete", "response.failed"), last


def negative_data_rejected(ctx, response, case) -> bool | None:
    """schemathesis' negative_data_rejection, except a request whose only fault is an extra header: an
    HTTP server cannot refuse headers it does not know (every client and proxy adds some)."""
    headers = {name.lower() for name in (case.headers or {})}
    if any(name.startswith("x-schemathesis-unknown") for name in headers) and response.status_code < 400:
        return True
    return negative_data_rejection(ctx, response, case)


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejected,
    positive_data_accepted,
    openai_error_bodies,
]


# A request over the body limit is rejected with 413 before its JSON is even parsed: a valid refusal
# of negative data (schemathesis' default list lacks it).
REJECTION_STATUSES = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]


def fuzz_config():
    import schemathesis

    # read whole streams (n choices of a long reply): schemathesis stops at 20 events by default
    return schemathesis.Config.from_dict(
        {"checks": {"negative_data_rejection": {"expected-statuses": REJECTION_STATUSES}}, "max-stream-events": 10_000}
    )
