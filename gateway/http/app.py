"""The Starlette application: OpenAI-compatible routes over one Backend, one worker, one Router."""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from contracts.engine import Backend
from gateway.config import GatewayConfig
from gateway.observability.metrics import GatewayMetrics
from gateway.routing.interface import Router, StaticRouter
from gateway.worker.errors import WorkerError
from gateway.worker.scheduler import Scheduler

from .admission import BodyBudget, body_slots
from .anthropic import count_tokens, messages
from .anthropic_errors import error_response_for
from .auth import ApiKeyMiddleware
from .embeddings import embeddings, ollama_embed, ollama_embeddings
from .errors import APIError, from_exception
from .generate import chat_completions, completions
from .ollama import chat as ollama_chat
from .ollama import generate_text as ollama_generate
from .ollama import root as ollama_root
from .ollama import running as ollama_ps
from .ollama import show as ollama_show
from .ollama import tags as ollama_tags
from .ollama import version as ollama_version
from .openapi import build_openapi
from .paths import CanonicalPaths
from .responses_api import input_tokens, responses
from .state import GatewayState, model_names
from .tokenize import detokenize, tokenize
from .views import admin_reload, get_model, health, list_models, metrics, openapi_schema, router_stats

# headers a browser client may read (the route taken, the request id, the queue's Retry-After)
EXPOSED_HEADERS = ("X-Switchyard-Engine", "X-Switchyard-Class", "X-Switchyard-Route-Reason", "X-Request-Id",
                   "request-id", "Retry-After")


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return error_response_for(request.url.path, exc)


async def _worker_error(request: Request, exc: Exception) -> Response:
    return error_response_for(request.url.path, from_exception(exc))


# Routes of APIs this server does not speak that clients try on it, and what to use instead: Ollama's model
# management (pull, push, create, copy, delete; its chat, generate, embed, tags, show, ps and version are served)
_OTHER_APIS = (
    (("/api/",), "this server serves Ollama's /api/chat, /api/generate, /api/embed, /api/embeddings, /api/tags, "
              "/api/show, /api/ps and /api/version for its one model, not Ollama's model management"),
)


def _elsewhere(path: str) -> str:
    """Why a route of another API is not here, and what to use instead ("" for any other unknown route)."""
    return next((f" ({why})." for prefixes, why in _OTHER_APIS if path.startswith(prefixes)), "")


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 (unknown route, wrong method) as OpenAI error objects (Anthropic's under
    /v1/messages)."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404 and request.url.path.startswith("/v1/responses/"):
        # a client retrieving, cancelling or deleting a stored response (GET/DELETE /v1/responses/{id}, .../cancel,
        # .../input_items): say why there is none rather than that the route is unknown
        err = APIError(404, f"No stored response at {request.url.path}: this server does not store responses "
                            "(every response is store: false); send the whole conversation in `input`.",
                       type="not_found_error", code="response_not_stored")
    elif exc.status_code == 404:
        err = APIError(404, f"Unknown route: {request.method} {request.url.path}{_elsewhere(request.url.path)}",
                       type="not_found_error", code="unknown_url")
    elif exc.status_code == 405:
        err = APIError(405, f"Method {request.method} is not allowed on {request.url.path}.", code="method_not_allowed")
    else:
        err = APIError(exc.status_code, str(exc.detail), type="invalid_request_error" if exc.status_code < 500 else "server_error")
    if exc.status_code in (404, 405):
        request.app.state.gateway.metrics.count_request("other", None, None, exc.status_code)
    return error_response_for(request.url.path, err, dict(exc.headers or {}))


async def _unhandled(request: Request, exc: Exception) -> Response:
    # logs the traceback; the client sees a plain 500
    return error_response_for(request.url.path, from_exception(exc))


def create_app(backend: Backend, *, router: Router | None = None, config: GatewayConfig = GatewayConfig()) -> Starlette:
    """Build the app. The worker thread starts with the app's lifespan and stops with it."""
    scheduler = Scheduler(max_queue=config.max_queue, retry_after_seconds=config.retry_after_seconds,
                          request_timeout=config.request_timeout_seconds, on_exit=backend.end_thread,
                          max_running=config.max_running,
                          memory_budget=config.request_memory_bytes, reserve=backend.request_bytes,
                          # the adaptive router applies the policy's latency SLO (batching.max_token_latency_ms)
                          admission=getattr(router, "admission_limit", None))
    gateway_metrics = GatewayMetrics()
    gateway_metrics.bind_scheduler(
        waiting=lambda: scheduler.waiting, running=lambda: scheduler.running, up=lambda: float(scheduler.alive),
        capacity=config.max_queue, running_limit=lambda: scheduler.running_limit,
        token_latency=lambda: scheduler.token_seconds if scheduler.token_seconds is not None else math.nan,
        waiting_memory=lambda: scheduler.waiting_for_memory, reserved=lambda: scheduler.reserved_bytes,
        memory_budget=config.request_memory_bytes, released=lambda: scheduler.releases,
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
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/responses/input_tokens", input_tokens, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/router/stats", router_stats, methods=["GET"]),
        Route("/admin/reload", admin_reload, methods=["POST"]),
        Route("/openapi.json", openapi_schema, methods=["GET"]),
        # Ollama's native API (gateway.http.ollama), for clients that speak only it
        Route("/api/chat", ollama_chat, methods=["POST"]),
        Route("/api/generate", ollama_generate, methods=["POST"]),
        Route("/api/embed", ollama_embed, methods=["POST"]),
        Route("/api/embeddings", ollama_embeddings, methods=["POST"]),
        Route("/api/tags", ollama_tags, methods=["GET"]),
        Route("/api/show", ollama_show, methods=["POST"]),
        Route("/api/ps", ollama_ps, methods=["GET"]),
        Route("/api/version", ollama_version, methods=["GET"]),
        Route("/", ollama_root, methods=["GET"]),
        # vLLM's (and llama.cpp's) tokenizer endpoints (gateway.http.tokenize)
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={APIError: _api_error, WorkerError: _worker_error, HTTPException: _http_error,
                            Exception: _unhandled},
    )
    app.state.gateway = state
    app.state.body_budget = BodyBudget(body_slots(config.max_queue), config.retry_after_seconds)
    app.state.openapi = build_openapi(config, tuple(backend.engine_names), tuple(state.model_names),
                                      backend.fills_in_middle, backend.embedding_size)
    if config.api_keys:  # a request without a valid key never reaches a handler
        app.add_middleware(ApiKeyMiddleware, keys=config.api_keys, protect_metrics=config.protect_metrics,
                           protect_admin=config.protect_admin)
    # before the key check and the routes: both see /v1/... paths
    app.add_middleware(CanonicalPaths, routes=[route.path for route in routes])
    if config.allowed_origins:  # outermost: browsers' preflights are answered before the key check
        app.add_middleware(CORSMiddleware, allow_origins=list(config.allowed_origins), allow_methods=["GET", "POST"],
                           allow_headers=["*"], expose_headers=list(EXPOSED_HEADERS), max_age=600)
    return app
