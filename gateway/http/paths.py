"""Paths clients reach the API by, besides the canonical `/v1/...`: a base URL configured without
`/v1` (`http://host:8000` + `/chat/completions`) and a trailing slash. llama.cpp's server answers
both; here they were a 404 and a 307 redirect that SDKs do not follow for a POST."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

# the OpenAI / Anthropic API endpoints (gateway.http.app), as a client without `/v1` writes them
API_PATHS = ("/chat/completions", "/completions", "/messages", "/messages/count_tokens", "/responses", "/models")


def canonical_path(path: str) -> str:
    """`/chat/completions/` -> `/v1/chat/completions`; every other path as it is."""
    if len(path) > 1 and path.endswith("/"):
        path = path.rstrip("/") or "/"
    if path in API_PATHS or path.startswith("/models/"):
        path = "/v1" + path
    return path


class CanonicalPaths:
    """ASGI middleware: routes (and the key check) see the canonical path."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = canonical_path(scope["path"])
            if path != scope["path"]:
                scope = {**scope, "path": path, "raw_path": path.encode()}
        await self.app(scope, receive, send)
