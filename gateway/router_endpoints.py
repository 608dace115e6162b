"""HTTP views of the router: GET /v1/router/stats and POST /admin/reload (loopback clients or a valid API key)."""

from __future__ import annotations

import ipaddress

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .auth import AUTHENTICATED
from .errors import APIError


def _router(request: Request):
    return request.app.state.gateway.router


def _is_loopback(request: Request) -> bool:
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _require_admin(request: Request) -> None:
    """Admin views answer loopback clients, and remote ones that sent a valid API key."""
    if not (_is_loopback(request) or request.scope.get(AUTHENTICATED, False)):
        raise APIError(403, f"{request.method} {request.url.path} is only accepted from loopback clients or with "
                       "an API key.", type="permission_error", code="forbidden")


async def router_stats(request: Request) -> Response:
    _require_admin(request)
    router = _router(request)
    if not callable(getattr(router, "stats", None)):
        raise APIError(404, "This server runs without the adaptive router: no statistics.", type="not_found_error",
                       code="router_stats_unavailable")
    return JSONResponse(router.stats())


async def admin_reload(request: Request) -> Response:
    """Re-read the policy file. 200 with the new version, or 422 with the errors (old policy stays)."""
    _require_admin(request)
    router = _router(request)
    if not callable(getattr(router, "reload", None)):
        raise APIError(404, "This server runs without a policy file to reload.", type="not_found_error",
                       code="reload_unavailable")
    result = router.reload("admin")
    return JSONResponse(result.as_json(), status_code=200 if result.ok else 422)
