"""Paths clients reach the API by, besides the canonical `/v1/...`: a base URL configured without
`/v1` (`http://host:8000` + `/chat/completions`) and a trailing slash. llama.cpp's server answers
both; here they were a 404 and a 307 redirect that SDKs do not follow for a POST."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

API_PREFIX = "/v1"


class CanonicalPaths:
    """ASGI middleware: routes (and the key check) see the canonical path. `routes` are the app's
    route paths; those under `/v1` are also reached without it (a `{parameter}` matches any rest)."""

    def __init__(self, app: ASGIApp, routes: Iterable[str]):
        self.app = app
        api = [path for path in routes if path.startswith(API_PREFIX + "/")]
        self._exact = frozenset(path for path in api if "{" not in path)
        self._prefixes = tuple(path.split("{", 1)[0] for path in api if "{" in path)

    def canonical(self, path: str) -> str:
        """`/chat/completions/` -> `/v1/chat/completions`; every other path as it is."""
        if len(path) > 1 and path.endswith("/"):
            path = path.rstrip("/") or "/"
        prefixed = API_PREFIX + path
        if not path.startswith(API_PREFIX + "/") and (prefixed in self._exact or prefixed.startswith(self._prefixes)):
            return prefixed
        return path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = self.canonical(scope["path"])
            if path != scope["path"]:
                scope = {**scope, "path": path, "raw_path": path.encode()}
        await self.app(scope, receive, send)
