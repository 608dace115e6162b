"""Optional API keys: `Authorization: Bearer <key>`, from a file (one key per line) or SWITCHYARD_API_KEYS.

Keys are required when the server binds to anything but loopback (serve refuses to start without
them). /health, /openapi.json and / (Ollama's liveness text) stay open; /metrics and the admin endpoints follow the config.
Every key is compared with hmac.compare_digest, and all keys are always compared, so neither the
position of a mismatch nor which key matched shows in the timing.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from .anthropic_errors import error_response_for
from .errors import APIError

ENV_VAR = "SWITCHYARD_API_KEYS"
OPEN_PATHS = frozenset({"/health", "/openapi.json", "/"})   # "/": Ollama's liveness text
ADMIN_PREFIXES = ("/admin/", "/v1/router/")
MIN_KEY_CHARS = 16
AUTHENTICATED = "switchyard.authenticated"   # scope key: True when the request carried a valid key
KEY_ID = "switchyard.key_id"                 # scope key: a fingerprint of that key (prefix-cache tenant)


def key_fingerprint(key: str) -> str:
    """Names a tenant without keeping its key: the first 16 hex digits of its SHA-256."""
    import hashlib

    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]


class AuthConfigError(ValueError):
    """The keys cannot be loaded, or the bind needs keys and has none."""


def parse_keys(text: str) -> tuple[str, ...]:
    """Keys separated by newlines, commas or spaces; '#' starts a comment line."""
    keys: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keys.extend(part for part in line.replace(",", " ").split() if part)
    short = [k for k in keys if len(k) < MIN_KEY_CHARS]
    if short:
        raise AuthConfigError(f"API keys must be at least {MIN_KEY_CHARS} characters ({len(short)} too short)")
    return tuple(dict.fromkeys(keys))


def load_keys(key_file: str | os.PathLike[str] | None, environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """Keys from --api-key-file and from $SWITCHYARD_API_KEYS together (either may be absent)."""
    environ = os.environ if environ is None else environ
    keys: list[str] = []
    if key_file is not None:
        try:
            keys.extend(parse_keys(Path(key_file).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            raise AuthConfigError(f"cannot read the API key file {key_file}: {exc}") from None
        if not keys:
            raise AuthConfigError(f"the API key file {key_file} holds no keys")
    keys.extend(parse_keys(environ.get(ENV_VAR, "")))
    return tuple(dict.fromkeys(keys))


def is_loopback_host(host: str) -> bool:
    """True for addresses only this machine can reach ("localhost", 127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a hostname or a wildcard: assume the network can reach it


def check_bind(host: str, keys: Iterable[str]) -> None:
    """Refuse a non-loopback bind without API keys."""
    if not is_loopback_host(host) and not tuple(keys):
        raise AuthConfigError(
            f"binding to {host!r} exposes the API to the network; give API keys with --api-key-file FILE "
            f"or ${ENV_VAR}, or bind to 127.0.0.1"
        )


class KeyChecker:
    def __init__(self, keys: Iterable[str]):
        self._keys = tuple(k.encode("utf-8") for k in keys)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def valid(self, presented: str) -> bool:
        token = presented.encode("utf-8", "surrogateescape")
        matched = False
        for key in self._keys:  # no early exit: the time does not depend on which key matched
            matched |= hmac.compare_digest(token, key)
        return matched


def bearer_token(scope: Scope) -> str | None:
    """The key a client presents: `Authorization: Bearer <key>` (OpenAI clients) or `x-api-key: <key>`
    (Anthropic clients)."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    for name, value in scope.get("headers", ()):
        if name == b"x-api-key" and value.strip():
            return value.decode("latin-1").strip()
    return None


def client_is_loopback(scope: Scope) -> bool:
    client = scope.get("client")
    return bool(client) and is_loopback_host(str(client[0]))


_ENDPOINT_LABELS = (("/v1/chat/completions", "chat_completions"), ("/v1/completions", "completions"),
                    ("/v1/messages", "messages"), ("/v1/responses", "responses"), ("/v1/models", "models"),
                    ("/metrics", "metrics"), ("/api/chat", "ollama"), ("/api/generate", "ollama"),
                    ("/api/tags", "models"), ("/api/show", "models"), ("/api/ps", "models"))


def _count_refusal(scope: Scope, status: int) -> None:
    """switchyard_requests_total{status="401"} by endpoint, so a burst of bad keys shows on the dashboard."""
    path = scope.get("path", "")
    endpoint = next((label for prefix, label in _ENDPOINT_LABELS if path.startswith(prefix)), "other")
    state = getattr(getattr(scope.get("app"), "state", None), "gateway", None)
    if state is not None:
        state.metrics.count_request(endpoint, None, None, status)


def unauthorized(message: str) -> APIError:
    return APIError(401, message, code="invalid_api_key",
                    headers={"WWW-Authenticate": 'Bearer realm="switchyard"'})


class ApiKeyMiddleware:
    """Pure ASGI (streams pass through untouched). Marks the scope with AUTHENTICATED for handlers."""

    def __init__(self, app: ASGIApp, keys: Iterable[str], protect_metrics: bool = True, protect_admin: bool = True):
        self.app = app
        self.checker = KeyChecker(keys)
        self.protect_metrics = protect_metrics
        self.protect_admin = protect_admin

    def _needs_key(self, path: str) -> bool:
        if path in OPEN_PATHS:
            return False
        if path == "/metrics":
            return self.protect_metrics
        if path.startswith(ADMIN_PREFIXES):
            return self.protect_admin  # when open, the handlers still admit loopback clients only
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = bearer_token(scope)
        authenticated = self.checker.enabled and token is not None and self.checker.valid(token)
        scope[AUTHENTICATED] = authenticated
        if authenticated and token is not None:
            scope[KEY_ID] = key_fingerprint(token)
        if self.checker.enabled and not authenticated and self._needs_key(scope.get("path", "")):
            if token is None:
                err = unauthorized("You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.")
            else:
                err = unauthorized("Incorrect API key provided.")
            _count_refusal(scope, err.status)
            await error_response_for(scope.get("path", ""), err)(scope, receive, send)
            return
        await self.app(scope, receive, send)
