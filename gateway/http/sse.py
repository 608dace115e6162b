"""Server-sent events: `data: <json>` frames, `data: [DONE]`, and a response that streams them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"   # an SSE comment: every client's parser skips it


def event(payload: Any, name: str | None = None) -> bytes:
    """One frame; `name` adds an `event:` line (Anthropic and Responses streams name their events)."""
    data = b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
    return b"event: " + name.encode() + b"\n" + data if name else data


@dataclass(frozen=True)
class StreamFormat:
    """How a renderer's stream travels: its media type, whether an idle stream can be kept open with
    KEEPALIVE (a comment line the format's parsers skip), and what a stream sends when it falls silent
    after its first event (a tool call's long object value goes out once written in full): KEEPALIVE, or the API's
    own keep-alive event."""

    media_type: str
    keeps_alive: bool
    idle: bytes = KEEPALIVE


SSE = StreamFormat("text/event-stream", keeps_alive=True)
# Anthropic's streams carry `ping` events between the others; its SDKs skip them
ANTHROPIC_SSE = StreamFormat("text/event-stream", keeps_alive=True, idle=event({"type": "ping"}, "ping"))


class SSEResponse(Response):
    """Streams pre-encoded SSE frames; on_close always runs (also when the client went away)."""

    media_type = "text/event-stream"

    def __init__(self, frames: AsyncIterator[bytes], headers: dict[str, str], on_close: Callable[[], Awaitable[None]],
                 stream_format: StreamFormat = SSE):
        """`stream_format`: SSE's, or another streamed format's (Ollama's NDJSON lines)."""
        self.media_type = stream_format.media_type
        self.frames = frames
        self.on_close = on_close
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for frame in self.frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # client disconnected mid-write; the disconnect watcher already cancelled the work
        finally:
            aclose = getattr(self.frames, "aclose", None)
            if aclose is not None:
                await aclose()
            await self.on_close()
