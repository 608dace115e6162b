"""How one API shapes a request's output: the full JSON body, the stream's frames, and its errors.
Every generation endpoint runs the same pipeline; a Renderer is all that differs between them."""

from __future__ import annotations

from typing import Any, Protocol

from starlette.responses import JSONResponse

from contracts.chat import CallDelta
from contracts.engine import GenerationChunk

from .errors import APIError
from .record import ChoiceReply, RequestRecord
from .sse import StreamFormat


class Renderer(Protocol):
    id: str
    stream_format: StreamFormat   # sse.SSE for every API but Ollama's NDJSON

    def full(self, record: RequestRecord) -> dict[str, Any]: ...

    def opening(self, record: RequestRecord) -> list[bytes]:
        """Frames before any choice (a stream's start; the route and prompt size are known)."""
        ...

    def choice_started(self, choice: ChoiceReply) -> list[bytes]: ...

    def chunk(self, choice: ChoiceReply, chunk: GenerationChunk) -> list[bytes]:
        """Frames for one chunk; `choice` already holds it (the record takes every item first)."""
        ...

    def closing(self, record: RequestRecord, include_usage: bool) -> list[bytes]:
        """Frames after the last chunk (usage, the end marker)."""
        ...

    def stream_error(self, err: APIError) -> list[bytes]:
        """An error after the stream started: an error event, then the end marker."""
        ...

    def error_response(self, err: APIError, headers: dict[str, str] | None = None) -> JSONResponse: ...


def around_text(deltas: list[CallDelta]) -> tuple[list[CallDelta], list[CallDelta]]:
    """A chunk's call deltas in the order a stream of blocks (Anthropic's content blocks, the Responses API's
    output items) writes them: those of a call opened in an earlier chunk, whose block is still the open one,
    go before any text of this chunk opens another; those of calls that open in this chunk go after its text."""
    opened = {delta.index for delta in deltas if delta.opens}
    return [d for d in deltas if d.index not in opened], [d for d in deltas if d.index in opened]
