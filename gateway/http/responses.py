"""Build OpenAI response objects (full responses and stream chunks) for chat and text completions."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .schemas import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatDelta,
    Completion,
    CompletionChoice,
    Usage,
)


def usage(prompt_tokens: int, completion_tokens: int) -> Usage:
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens)


@dataclass
class ResponseBuilder:
    """Shapes one request's output; `chat` selects chat.completion(.chunk) vs text_completion."""

    chat: bool
    model: str
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.id:
            self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex

    def full(self, text: str, finish_reason: str | None, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        u = usage(prompt_tokens, completion_tokens)
        if self.chat:
            choice = ChatChoice(message=AssistantMessage(content=text), finish_reason=finish_reason)
            return ChatCompletion(id=self.id, created=self.created, model=self.model, choices=[choice], usage=u).model_dump()
        choice = CompletionChoice(text=text, finish_reason=finish_reason)
        return Completion(id=self.id, created=self.created, model=self.model, choices=[choice], usage=u).model_dump()

    def role_chunk(self) -> dict[str, Any] | None:
        """Chat streams open with the assistant role (and empty content), as OpenAI's do."""
        return self._chunk(ChatDelta(role="assistant", content=""), None) if self.chat else None

    def content_chunk(self, text: str, finish_reason: str | None) -> dict[str, Any]:
        if self.chat:
            return self._chunk(ChatDelta(content=text) if text else ChatDelta(), finish_reason)
        choice = CompletionChoice(text=text, finish_reason=finish_reason)
        return Completion(id=self.id, created=self.created, model=self.model, choices=[choice]).model_dump(exclude={"usage"})

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        u = usage(prompt_tokens, completion_tokens)
        if self.chat:
            return ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=[], usage=u).model_dump()
        return Completion(id=self.id, created=self.created, model=self.model, choices=[], usage=u).model_dump()

    def _chunk(self, delta: ChatDelta, finish_reason: str | None) -> dict[str, Any]:
        chunk = ChatCompletionChunk(
            id=self.id, created=self.created, model=self.model,
            choices=[ChatChunkChoice(delta=delta, finish_reason=finish_reason)],
        ).model_dump(exclude={"usage"})
        chunk["choices"][0]["delta"] = delta.model_dump(exclude_none=True)
        return chunk
