"""The small views: health, models, metrics, OpenAPI, and the router's admin views.

GET /v1/router/stats and POST /admin/reload answer loopback clients, or any client with a valid API key.
"""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.worker.errors import WorkerUnavailable
from gateway.worker.scheduler import Scheduler

from .auth import AUTHENTICATED
from .errors import APIError, from_exception
from .schemas import ModelCard, ModelList
from .state import GatewayState


def _state(request: Request) -> GatewayState:
    return request.app.state.gateway


def _unavailable_reason(scheduler: Scheduler) -> str | None:
    if scheduler.death is not None:
        return "the model worker died"
    if not scheduler.alive:
        return "the model worker is not running"
    if not scheduler.admitting:
        return "the server is shutting down"
    return None


async def health(request: Request) -> Response:
    """200 while the model is loaded and requests are admitted; 503 before, after a worker crash,
    and while draining for shutdown (so a load balancer or launchd check stops sending work)."""
    state = _state(request)
    reason = _unavailable_reason(state.scheduler)
    state.metrics.count_request("health", None, None, 200 if reason is None else 503)
    if reason is not None:
        err = from_exception(WorkerUnavailable(f"Unavailable: {reason}."))
        return JSONResponse({"status": "unavailable", **err.body()}, status_code=503)
    return JSONResponse(
        {
            "status": "ok",
            "model": state.backend.model_id,
            "engines": list(state.backend.engine_names),
            "requests_waiting": state.scheduler.waiting,
            "requests_running": state.scheduler.running,
        }
    )


def _card(state: GatewayState, name: str) -> ModelCard:
    context = state.backend.context_length
    longest_reply = min(context - 1, state.config.max_tokens_limit or context)
    created_at = datetime.fromtimestamp(state.created, tz=UTC).isoformat().replace("+00:00", "Z")
    return ModelCard(id=name, created=state.created, display_name=name, created_at=created_at,
                     max_model_len=context, max_input_tokens=context - 1, max_tokens=longest_reply)


async def list_models(request: Request) -> Response:
    """The served model under each name a request may use: clients that pick a model from this list
    (Open WebUI, Continue) find the aliases the server was started with."""
    state = _state(request)
    state.metrics.count_request("models", None, None, 200)
    aliases = [a for a in dict.fromkeys(state.config.model_aliases) if a != state.backend.model_id]
    cards = [_card(state, name) for name in (state.backend.model_id, *aliases)]
    return JSONResponse(ModelList(data=cards, first_id=cards[0].id, last_id=cards[-1].id).model_dump())


async def get_model(request: Request) -> Response:
    state = _state(request)
    name = request.path_params["model"]
    if name not in state.model_names:
        state.metrics.count_request("models", None, None, 404)
        raise APIError(404, f"The model {name!r} does not exist.", param="model", code="model_not_found")
    state.metrics.count_request("models", None, None, 200)
    return JSONResponse(_card(state, name).model_dump())


async def metrics(request: Request) -> Response:
    state = _state(request)
    state.metrics.count_request("metrics", None, None, 200)
    return Response(state.metrics.exposition(), media_type=state.metrics.content_type)


async def openapi_schema(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


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
