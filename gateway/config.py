"""Gateway settings (HTTP binding, queue, defaults, request limits). Small on purpose."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GatewayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # Requests allowed to wait behind the running one; one more gets 429 + Retry-After.
    max_queue: int = Field(16, ge=0)
    # Requests the worker runs at once, interleaved step by step; those decoding raw share one batched
    # forward (continuous batching). 1 = one at a time. `switchyard serve --max-batch` sets it.
    max_running: int = Field(1, ge=1, le=256)
    # Bytes the running requests' caches may hold together, each counting its context so far and 256 tokens of
    # growth (Backend.request_bytes; gateway/worker/scheduler.py); a request that would not fit waits, routed, ahead
    # of the queue, until enough has finished, and the newest running one gives its caches back when they outgrow
    # it. At least one always runs. None: no budget. `--request-memory-bytes`.
    request_memory_bytes: int | None = Field(None, ge=1)
    retry_after_seconds: int = Field(1, ge=1)
    # max_tokens when a request does not say (OpenAI's chat default is "until the context ends"); always
    # shortened to the room the prompt leaves in the context. Qwen3.6's card recommends ~32k output tokens.
    default_max_tokens: int = Field(32768, ge=1)
    # Extra names accepted for `model` besides the served id, its directory name and "default".
    model_aliases: tuple[str, ...] = ()
    # Seconds uvicorn lets open streams finish on shutdown before closing them.
    shutdown_timeout_seconds: float = Field(10.0, gt=0)
    # Request limits (docs/limits.md). Every input is bounded by max_body_bytes first (413), so no
    # request can make the server allocate without bound; the others give clear 400s.
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    max_stop_sequences: int = Field(16, ge=1)
    max_stop_chars: int = Field(512, ge=1)           # per stop sequence (the detokenizer holds this much back)
    max_tokens_limit: int | None = Field(None, ge=1)  # largest max_tokens accepted; None: the model's context length
    max_choices: int = Field(8, ge=1)                 # largest `n` (choices are generated one after another)
    max_prompts: int = Field(32, ge=1)                # prompts in one /v1/completions request (LangChain batches 20)
    max_embedding_inputs: int = Field(2048, ge=1)     # texts in one embeddings request (OpenAI's own limit)
    # Origins allowed to call the API from a browser (CORS); empty = no CORS headers, ["*"] = any.
    allowed_origins: tuple[str, ...] = ()
    max_messages: int = Field(4096, ge=1)            # chat messages per request
    # Seconds a request body may take to arrive whole (a body slot is held meanwhile); past it: 408.
    # Without it, a few clients that send half a body and stall would hold every slot for ever.
    body_read_timeout_seconds: float | None = Field(60.0, gt=0)
    # Wall-clock budget of one request from admission (queue wait included), checked between engine
    # steps; past it the generation stops and the client gets a 504 (in-stream error event for SSE).
    request_timeout_seconds: float | None = Field(600.0, gt=0)
    # Seconds a stream may wait for its first token (in the queue, or prefilling a long prompt) before its
    # headers go out and an SSE comment follows every as many seconds until the tokens come: clients and
    # proxies drop a connection idle for a minute or so. Still queued, its route is not chosen yet: the route's
    # headers then come later, as an SSE comment. An error after that is in the stream. None: a stream
    # starts with its first token (every error before it is a plain HTTP error).
    stream_keepalive_seconds: float | None = Field(10.0, gt=0)
    # API keys (Authorization: Bearer); empty = no auth (only allowed on a loopback bind, see serve).
    api_keys: tuple[str, ...] = Field((), repr=False)
    protect_metrics: bool = True   # with keys: /metrics needs one too (False: open, for a local Prometheus)
    # With API keys, a prefix-cache entry is reused only by requests with the same key, unless shared.
    share_prefix_cache: bool = False
    protect_admin: bool = True     # with keys: /admin/* and /v1/router/stats need one (False: loopback clients only)
