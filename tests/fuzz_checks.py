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

from gateway.http.schemas import ErrorResponse, Health


def openai_error_bodies(ctx, response, case) -> bool | None:
    """Every error is an OpenAI error object; an SSE stream is JSON frames (chunks or an error
    object) ending with [DONE]."""
    content_type = response.headers.get("content-type", [""])
    content_type = content_type[0] if isinstance(content_type, list) else content_type
    if response.status_code >= 400:
        if case.path == "/health" and response.status_code == 503:
            health = Health.model_validate_json(response.content)
            assert health.status == "unavailable" and health.error is not None
        elif not (case.path == "/admin/reload" and response.status_code == 422):  # policy errors, documented
            ErrorResponse.model_validate_json(response.content)
        return True
    if content_type.startswith("text/event-stream"):
        frames = [line[6:] for line in response.content.decode().splitlines() if line.startswith("data: ")]
        assert frames and frames[-1] == "[DONE]", frames[-3:]
        for frame in frames[:-1]:
            payload = json.loads(frame)
            if "error" in payload:
                ErrorResponse.model_validate(payload)
            else:
                assert payload["object"] in ("chat.completion.chunk", "text_completion"), payload
    return True


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    openai_error_bodies,
]


# A request over the body limit is rejected with 413 before its JSON is even parsed: a valid refusal
# of negative data (schemathesis' default list lacks it).
REJECTION_STATUSES = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]


def fuzz_config():
    import schemathesis

    return schemathesis.Config.from_dict(
        {"checks": {"negative_data_rejection": {"expected-statuses": REJECTION_STATUSES}}}
    )
