"""Anthropic's error object, for every error a /v1/messages client sees: those its handler raises and
those answered before it runs (a refused key, an unknown route or method under /v1/messages); and
`error_response_for`, which answers any path in its API's shape."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from contracts.errors import ContextLengthExceeded

from .errors import APIError, ContextOverflowError
from .ollama_errors import error_response as ollama_error_response
from .ollama_errors import is_ollama_path

MESSAGES_PATH = "/v1/messages"

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
               504: "timeout_error"}


def error_body(err: APIError) -> dict[str, Any]:
    message = overflow_message(err.overflow) if isinstance(err, ContextOverflowError) else err.message
    # Anthropic has no type for the other 4xx (408, 415): they are the request's fault, not "api_error",
    # its type for a failure on the server's side
    fallback = "invalid_request_error" if err.status < 500 else "api_error"
    return {"type": "error", "error": {"type": ERROR_TYPES.get(err.status, fallback), "message": message}}


def overflow_message(overflow: ContextLengthExceeded) -> str:
    """A prompt that does not fit, in Anthropic's words, which clients parse: "prompt is too long" is what
    agents compact their conversation on (and litellm's ContextWindowExceededError), and "input length and
    `max_tokens` exceed context limit: P + T > C" lets them retry with a max_tokens that fits."""
    longest = overflow.context_length - 1   # the longest prompt that leaves room for one token
    if overflow.max_tokens is None or overflow.prompt_tokens > longest:
        return f"prompt is too long: {overflow.prompt_tokens} tokens > {longest} maximum"
    return (f"input length and `max_tokens` exceed context limit: {overflow.prompt_tokens} + {overflow.max_tokens} "
            f"> {overflow.context_length}, decrease input length or `max_tokens` and try again")


def error_response(err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(err), status_code=err.status, headers={**err.headers, **(headers or {})})


def is_messages_path(path: str) -> bool:
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def error_response_for(path: str, err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The error in the shape of the API its path belongs to (Anthropic's under /v1/messages, Ollama's under
    /api/, else OpenAI's)."""
    if is_messages_path(path):
        return error_response(err, headers)
    if is_ollama_path(path):
        return ollama_error_response(err, headers)
    return err.response(headers)
