"""POST /v1/embeddings (OpenAI's), POST /api/embed and POST /api/embeddings (Ollama's): the one model's embeddings.

Clients that index documents ask the server they chat with for embeddings: RAG in chat UIs, coding agents'
codebase search, LangChain / LlamaIndex given one base URL. Ollama and llama.cpp answer them for a generative
model too; here the vector is the mean of the target's final hidden states over the text (engines.embed), which
a model not trained to embed gives best; an embedding model serves retrieval better where one is available.

Each input is tokenized as /v1/completions tokenizes a prompt (token ids are taken as given), checked against
the context, and embedded on the model's worker, queued as any request (priority header, queue limit, timeout,
a client that hangs up), one forward per round beside the running streams (Backend.embed).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from contracts.errors import InvalidRequestError
from gateway.worker.errors import QueueFull, WorkerUnavailable

from .disconnect import DisconnectWatcher
from .errors import APIError, bad_request, from_exception
from .generate import check_model, parse, read_json_object
from .ollama import served_model
from .ollama_errors import error_response as ollama_error
from .ollama_schemas import OllamaEmbeddingsRequest, OllamaEmbeddingsResponse, OllamaEmbedRequest, OllamaEmbedResponse
from .record import CLIENT_CLOSED
from .request_spec import header_priority
from .schemas import PositiveInt32, TokenIds, _Strict, texts_or_token_ids
from .state import GatewayState

ENDPOINT = "embeddings"   # the metrics' endpoint label


class EmbeddingRequest(_Strict):
    """OpenAI's body (the openai SDK sends `encoding_format: "base64"` unless told otherwise)."""

    model: str | None = None
    input: Annotated[str | list[str] | TokenIds | list[TokenIds], BeforeValidator(texts_or_token_ids("input"))]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: PositiveInt32 | None = None   # the first d components, renormalised (as text-embedding-3 reads it)
    user: str | None = None


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str   # a unit vector; base64: its float32 values' little-endian bytes


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingUsage


class _Gone(Exception):
    """The client hung up: nobody to answer."""


def _tokens(texts: Sequence[str | Sequence[int]], truncate: bool, state: GatewayState) -> list[list[int]]:
    """Each input's token ids within the context: cut to it (`truncate`, Ollama's default) or a 400 (the
    tokenizer only: runs off the worker)."""
    backend, limit = state.backend, state.backend.context_length
    if len(texts) > state.config.max_embedding_inputs:
        raise bad_request(f"input holds {len(texts)} items; at most {state.config.max_embedding_inputs} are "
                          "allowed in one request", param="input")
    inputs = []
    for i, text in enumerate(texts):
        name = f"input[{i}]" if len(texts) > 1 else "input"
        if isinstance(text, str) and not text:
            raise bad_request(f"{name} is empty: there is nothing to embed", param="input")
        try:
            ids = backend.encode_prompt(text)
        except InvalidRequestError as exc:   # an id past the vocabulary: the error names this body's field
            raise bad_request(str(exc).replace("prompt:", f"{name}:", 1), param="input", code=exc.code) from None
        if len(ids) > limit:
            if not truncate:
                raise APIError(400, f"This model's maximum context length is {limit} tokens. However, {name} "
                                    f"resulted in {len(ids)} tokens. Please reduce the length of the input.",
                               param="input", code="context_length_exceeded")
            ids = ids[:limit]
        inputs.append(ids)
    return inputs


@dataclass(frozen=True)
class _Embedded:
    """The inputs' mean hidden states (not normalised), in input order, and the tokens they held."""

    vectors: list[np.ndarray]
    tokens: int


async def _embedded(request: Request, state: GatewayState, texts: Sequence[str | Sequence[int]], *,
                    truncate: bool = False, dimensions: int | None = None) -> _Embedded:
    """Every input embedded on the worker (raises APIError, QueueFull, WorkerUnavailable, ...)."""
    # checked for a load call too (nothing to embed), as the same request with inputs would be
    priority = header_priority(request.headers.get("x-switchyard-priority")) or 0
    if dimensions is not None and dimensions > state.backend.embedding_size:
        raise bad_request(f"dimensions {dimensions} is more than this model's embeddings have "
                          f"({state.backend.embedding_size})", param="dimensions")
    if not texts:
        return _Embedded([], 0)
    inputs = await run_in_threadpool(_tokens, texts, truncate, state)
    backend = state.backend
    ticket = state.scheduler.submit(lambda t: backend.embed(inputs), priority=priority)
    watcher = DisconnectWatcher(request.receive, ticket.cancel)
    done: dict[int, np.ndarray] = {}
    try:
        async for vectors in ticket:
            done.update(vectors)
    finally:
        watcher.stop()
    if watcher.disconnected:
        raise _Gone()
    if len(done) < len(inputs):   # dropped from the queue without a disconnect: the server is stopping
        raise WorkerUnavailable("The server is shutting down.")
    return _Embedded([done[i] for i in range(len(inputs))], sum(map(len, inputs)))


def unit(vector: np.ndarray, dimensions: int | None = None) -> np.ndarray:
    """The vector's first `dimensions` components (None: all) scaled to length 1 (a zero vector stays zero)."""
    kept = vector[:dimensions] if dimensions is not None else vector
    norm = float(np.linalg.norm(kept))
    return kept / norm if norm > 0 else kept


def _encoded(vector: np.ndarray, encoding: str | None) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


async def _serve(request: Request, reply: Callable[[dict[str, Any], GatewayState, Request], Awaitable[BaseModel]],
                 error_response: Callable[[APIError], Response]) -> Response:
    state: GatewayState = request.app.state.gateway
    try:
        if state.scheduler.full:  # no point reading a body that cannot be queued
            raise QueueFull(state.config.retry_after_seconds)
        with request.app.state.body_budget.slot():
            data = await read_json_object(request, state.config.max_body_bytes, state.config.body_read_timeout_seconds)
        body = await reply(data, state, request)
    except _Gone:
        state.metrics.count_request(ENDPOINT, None, None, CLIENT_CLOSED)
        return Response(status_code=CLIENT_CLOSED)
    except Exception as exc:  # noqa: BLE001 - every failure is an error object of the endpoint's API
        err = from_exception(exc)
        state.metrics.count_request(ENDPOINT, None, None, err.status)
        return error_response(err)
    state.metrics.count_request(ENDPOINT, None, None, 200)
    return Response(body.model_dump_json(exclude_none=True), media_type="application/json")


async def _openai(data: dict[str, Any], state: GatewayState, request: Request) -> EmbeddingList:
    req = parse(EmbeddingRequest, data)
    check_model(req.model, state)
    one = isinstance(req.input, str) or isinstance(req.input[0], int)   # a text, or one text's token ids
    done = await _embedded(request, state, [req.input] if one else req.input, dimensions=req.dimensions)
    return EmbeddingList(
        data=[EmbeddingData(index=i, embedding=_encoded(unit(vector, req.dimensions), req.encoding_format))
              for i, vector in enumerate(done.vectors)],
        model=state.backend.model_id, usage=EmbeddingUsage(prompt_tokens=done.tokens, total_tokens=done.tokens))


async def _ollama_embed(data: dict[str, Any], state: GatewayState, request: Request) -> OllamaEmbedResponse:
    started = time.perf_counter_ns()
    req = parse(OllamaEmbedRequest, data)
    name = served_model(req.model, state) or state.backend.model_id
    # none, [] or "" (the ollama client's default input): the load call
    texts = ([req.input] if req.input else []) if isinstance(req.input, str) else list(req.input or ())
    done = await _embedded(request, state, texts, truncate=req.truncate is not False, dimensions=req.dimensions)
    return OllamaEmbedResponse(model=name, embeddings=[unit(v, req.dimensions).tolist() for v in done.vectors],
                               total_duration=time.perf_counter_ns() - started, load_duration=0,
                               prompt_eval_count=done.tokens)


async def _ollama_embeddings(data: dict[str, Any], state: GatewayState, request: Request) -> OllamaEmbeddingsResponse:
    req = parse(OllamaEmbeddingsRequest, data)
    served_model(req.model, state)
    # Ollama's older call cuts a long prompt to the context too, and returns the vector as it is
    done = await _embedded(request, state, [req.prompt] if req.prompt else [], truncate=True)
    return OllamaEmbeddingsResponse(embedding=done.vectors[0].tolist() if done.vectors else [])


async def embeddings(request: Request) -> Response:
    """POST /v1/embeddings: OpenAI's embeddings, one unit vector per input."""
    return await _serve(request, _openai, lambda err: err.response())


async def ollama_embed(request: Request) -> Response:
    """POST /api/embed: Ollama's embeddings, unit vectors (an empty input is the load call)."""
    return await _serve(request, _ollama_embed, ollama_error)


async def ollama_embeddings(request: Request) -> Response:
    """POST /api/embeddings: Ollama's older call, one vector as it is (an empty prompt is the load call)."""
    return await _serve(request, _ollama_embeddings, ollama_error)
