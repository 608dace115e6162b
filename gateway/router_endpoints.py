"""HTTP views of the router: GET /v1/router/stats and POST /admin/reload (loopback clients only)."""

from __future__ import annotations

import ipaddress

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .errors import APIError


def _router(request: Request):
    return request.app.state.gateway.router


def _is_loopback(request: Request) -> bool:
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def router_stats(request: Request) -> Response:
    router = _router(request)
    if not callable(getattr(router, "stats", None)):
        raise APIError(404, "This server runs without the adaptive router: no statistics.", type="not_found_error",
                       code="router_stats_unavailable")
    return JSONResponse(router.stats())


async def admin_reload(request: Request) -> Response:
    """Re-read the policy file. 200 with the new version, or 422 with the errors (old policy stays)."""
    if not _is_loopback(request):
        raise APIError(403, "POST /admin/reload is only accepted from loopback clients.", type="permission_error",
                       code="forbidden")
    router = _router(request)
    if not callable(getattr(router, "reload", None)):
        raise APIError(404, "This server runs without a policy file to reload.", type="not_found_error",
                       code="reload_unavailable")
    result = router.reload("admin")
    return JSONResponse(result.as_json(), status_code=200 if result.ok else 422)
