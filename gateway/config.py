"""Gateway settings (HTTP binding, queue, defaults, request limits). Small on purpose."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GatewayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # Requests allowed to wait behind the running one; one more gets 429 + Retry-After.
    max_queue: int = Field(16, ge=0)
    retry_after_seconds: int = Field(1, ge=1)
    # max_tokens when a request does not say (OpenAI's chat default is "until the context ends").
    default_max_tokens: int = Field(512, ge=1)
    # Extra names accepted for `model` besides the served id, its directory name and "default".
    model_aliases: tuple[str, ...] = ()
    # Seconds uvicorn lets open streams finish on shutdown before closing them.
    shutdown_timeout_seconds: float = Field(10.0, gt=0)
    # Limits (extended by the reliability work): request body size -> 413, stop list length -> 400.
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    max_stop_sequences: int = Field(16, ge=1)
