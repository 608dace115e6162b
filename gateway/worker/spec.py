"""RequestSpec: one generation as the worker runs it, with no HTTP in it (built by gateway/http)."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.request_text import RequestText
from contracts.sampling import SamplingParams


@dataclass(frozen=True)
class RequestSpec:
    """Everything the worker needs for one generation, with no HTTP in it."""

    messages: list[dict] | None      # chat: [{"role", "content"}]; None for a text completion
    prompt: str | None               # completion prompt; None for chat
    params: SamplingParams
    forced_engine: str | None        # None = let the router decide
    text: RequestText                # what routing and the classifier read, split once at the edge
    max_tokens_defaulted: bool = False   # the request did not say: the worker may shorten it to fit the context
