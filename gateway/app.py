"""The Starlette application: OpenAI-compatible routes over one Backend, one worker, one Router."""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engines.types import Backend, StepResult

from .admission import BodyBudget, body_slots
from .auth import ApiKeyMiddleware
from .config import GatewayConfig
from .endpoints import chat_completions, completions
from .errors import APIError, WorkerUnavailableError, from_exception
from .metrics import GatewayMetrics
from .openapi import build_openapi
from .router_endpoints import admin_reload, router_stats
from .routing import RouteDecision, RouteRequest, Router
from .scheduler import Scheduler
from .schemas import ModelCard, ModelList
from .state import GatewayState, model_names


class StaticRouter:
    """Default router before the adaptive one: a forced engine if asked, else raw (reason "fallback")."""

    def __init__(self, engine_names: tuple[str, ...]):
        self.engine_names = tuple(engine_names)

    def choose(self, request: RouteRequest) -> RouteDecision:
        forced = request.forced_engine
        if forced not in (None, "auto") and forced in self.engine_names:
            return RouteDecision(engine=forced, klass="prose", reason="forced")
        return RouteDecision(engine="raw", klass="prose", reason="fallback")

    def observe(self, decision: RouteDecision, step: StepResult) -> None:
        pass

    def finished(self, decision: RouteDecision, error: BaseException | None) -> None:
        pass


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
        err = WorkerUnavailableError(f"Unavailable: {reason}.")
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


def _card(state: GatewayState) -> ModelCard:
    return ModelCard(id=state.backend.model_id, created=state.created)


async def list_models(request: Request) -> Response:
    state = _state(request)
    state.metrics.count_request("models", None, None, 200)
    return JSONResponse(ModelList(data=[_card(state)]).model_dump())


async def get_model(request: Request) -> Response:
    state = _state(request)
    name = request.path_params["model"]
    if name not in state.model_names:
        state.metrics.count_request("models", None, None, 404)
        raise APIError(404, f"The model {name!r} does not exist.", param="model", code="model_not_found")
    state.metrics.count_request("models", None, None, 200)
    return JSONResponse(_card(state).model_dump())


async def metrics(request: Request) -> Response:
    state = _state(request)
    state.metrics.count_request("metrics", None, None, 200)
    return Response(state.metrics.exposition(), media_type=state.metrics.content_type)


async def openapi_schema(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 (unknown route, wrong method) as OpenAI error objects."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        err = APIError(404, f"Unknown route: {request.method} {request.url.path}", type="not_found_error", code="unknown_url")
    elif exc.status_code == 405:
        err = APIError(405, f"Method {request.method} is not allowed on {request.url.path}.", code="method_not_allowed")
    else:
        err = APIError(exc.status_code, str(exc.detail), type="invalid_request_error" if exc.status_code < 500 else "server_error")
    if exc.status_code in (404, 405):
        _state(request).metrics.count_request("other", None, None, exc.status_code)
    return err.response(dict(exc.headers or {}))


async def _unhandled(request: Request, exc: Exception) -> Response:
    return from_exception(exc).response()  # logs the traceback; the client sees a plain 500


def create_app(backend: Backend, *, router: Router | None = None, config: GatewayConfig = GatewayConfig()) -> Starlette:
    """Build the app. The worker thread starts with the app's lifespan and stops with it."""
    scheduler = Scheduler(max_queue=config.max_queue, retry_after_seconds=config.retry_after_seconds,
                          request_timeout=config.request_timeout_seconds)
    gateway_metrics = GatewayMetrics()
    gateway_metrics.bind_scheduler(
        waiting=lambda: scheduler.waiting, running=lambda: scheduler.running, up=lambda: float(scheduler.alive),
        capacity=config.max_queue,
    )
    state = GatewayState(
        backend=backend,
        router=router if router is not None else StaticRouter(tuple(backend.engine_names)),
        config=config,
        scheduler=scheduler,
        metrics=gateway_metrics,
        model_names=model_names(backend.model_id, config.model_aliases),
    )
    gateway_metrics.bind_backend(backend)        # memory and loaded engines, read at scrape time
    gateway_metrics.bind_router(state.router)    # classifier latency, policy info (adaptive router only)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        scheduler.start()
        try:
            yield
        finally:
            scheduler.stop()

    routes = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/router/stats", router_stats, methods=["GET"]),
        Route("/admin/reload", admin_reload, methods=["POST"]),
        Route("/openapi.json", openapi_schema, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={APIError: _api_error, HTTPException: _http_error, Exception: _unhandled},
    )
    app.state.gateway = state
    app.state.body_budget = BodyBudget(body_slots(config.max_queue), config.retry_after_seconds)
    app.state.openapi = build_openapi(config, tuple(backend.engine_names), tuple(state.model_names))
    if config.api_keys:  # outermost: a request without a valid key never reaches a handler
        app.add_middleware(ApiKeyMiddleware, keys=config.api_keys, protect_metrics=config.protect_metrics,
                           protect_admin=config.protect_admin)
    return app
