"""Ollama's error body, for every error a client of Ollama's API sees: those its handlers raise and those
answered before they run (a refused key, an unknown route or method under /api/)."""

from __future__ import annotations

from starlette.responses import JSONResponse

from .errors import APIError

OLLAMA_PREFIX = "/api/"


def error_response(err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
    """{"error": "message"}: the ollama client raises ResponseError with it."""
    return JSONResponse({"error": err.message}, status_code=err.status, headers={**err.headers, **(headers or {})})


def is_ollama_path(path: str) -> bool:
    return path.startswith(OLLAMA_PREFIX)
