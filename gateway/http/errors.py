"""OpenAI-shaped HTTP errors, and the one place typed library errors become HTTP statuses."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from starlette.responses import JSONResponse

from contracts.errors import (
    ContextLengthExceeded,
    EngineFailure,
    EngineUnavailableError,
    InvalidRequestError,
    ModelLoadError,
)
from gateway.worker.errors import QueueFull, RequestTimedOut, WorkerUnavailable

log = logging.getLogger("switchyard.gateway")


class APIError(Exception):
    """An error the client sees as {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self, extra_headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers={**self.headers, **(extra_headers or {})})


class ContextOverflowError(APIError):
    """400 context_length_exceeded that keeps the numbers, so each API can say it in the words its
    clients parse (gateway.http.anthropic)."""

    def __init__(self, overflow: ContextLengthExceeded):
        super().__init__(400, str(overflow), param=overflow.param, code=overflow.code)
        self.overflow = overflow


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


# Names pydantic puts in `loc` for the member of a union (str | list[...]) or a validator step.
_UNION_TAGS = ("str", "list[str]", "list[TextPart]", "list[any]", "function-after", "function-before")


def _is_union_tag(part: Any) -> bool:
    """pydantic names the member of a union it tried (`literal[...]`, a model's class name, ...)
    inside the error's location; the client's field path has no such parts."""
    return isinstance(part, str) and (part in _UNION_TAGS or part.startswith(("literal[", "function-", "list[", "dict["))
                                      or part[:1].isupper())


def _path(loc: tuple[Any, ...]) -> list[str]:
    return [str(p) for p in loc if not _is_union_tag(p)]


def _loc_to_param(loc: tuple[Any, ...]) -> str | None:
    return ".".join(_path(loc)) or None


def _most_specific(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """Of the errors on the first failing field, the deepest: for `content: str | list[part]` given a
    list, "part.text missing" says more than "input should be a string"."""
    first = _path(tuple(errors[0].get("loc", ())))
    same_field = [e for e in errors if _path(tuple(e.get("loc", ())))[: len(first)] == first]
    return max(same_field, key=lambda e: len(e.get("loc", ())))


def from_validation_error(exc: ValidationError) -> APIError:
    """The first failing field as a 400 with `param` set to its path."""
    err = _most_specific(exc.errors(include_url=False, include_input=False))
    param = _loc_to_param(tuple(err.get("loc", ())))
    if err.get("type") == "extra_forbidden":
        return bad_request(f"Unrecognized request argument supplied: {param}", param=param, code="unknown_parameter")
    message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return bad_request(f"Invalid value for '{param}': {message}" if param else message, param=param, code="invalid_value")


def from_exception(exc: BaseException) -> APIError:
    """Map anything raised while serving a request to the error the client sees (never a traceback)."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, QueueFull):
        return APIError(429, str(exc), type="rate_limit_error", code="queue_full",
                        headers={"Retry-After": str(exc.retry_after_seconds)})
    if isinstance(exc, WorkerUnavailable):
        return APIError(503, str(exc), type="server_error", code="worker_unavailable")
    if isinstance(exc, RequestTimedOut):
        return APIError(504, str(exc), type="server_error", code="request_timeout")
    if isinstance(exc, ContextLengthExceeded):
        return ContextOverflowError(exc)
    if isinstance(exc, InvalidRequestError):
        return APIError(400, str(exc), param=exc.param, code=exc.code)
    if isinstance(exc, EngineUnavailableError):
        return APIError(503, str(exc), type="server_error", code="engine_unavailable")
    if isinstance(exc, EngineFailure):
        log.error("engine failure: %s", exc, exc_info=exc.cause)
        return APIError(500, f"The {exc.engine!r} engine failed while generating.", type="server_error", code="engine_failure")
    if isinstance(exc, ModelLoadError):
        log.error("model load error: %s", exc)
        return APIError(500, "The model could not be loaded.", type="server_error", code="model_load_error")
    log.error("internal error while serving a request", exc_info=exc)
    return APIError(500, "Internal server error.", type="server_error", code="internal_error")
