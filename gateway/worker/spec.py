"""RequestSpec: one generation as the worker runs it, with no HTTP in it (built by gateway/http)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.request_text import RequestText
from contracts.sampling import SamplingParams

Prompt = str | tuple[int, ...]   # a completion prompt: text, or token ids the client tokenized itself


@dataclass(frozen=True)
class RequestSpec:
    """Everything the worker needs for one generation, with no HTTP in it."""

    messages: list[dict] | None      # chat, as the chat template reads it; None for a text completion
    # a text completion's prompts, each text or this model's token ids (one choice per prompt, times n); () for chat
    prompts: tuple[Prompt, ...]
    params: SamplingParams
    forced_engine: str | None        # None = let the router decide
    text: RequestText                # what routing and the classifier read, split once at the edge
    max_tokens_defaulted: bool = False   # the request did not say: the worker may shorten it to fit the context
    tools: list[dict] | None = None      # OpenAI function tools, offered through the chat template
    tool_choice: Any = None              # "none" | "auto" | "required" | {"type": "function", "function": {...}}
    answer_schema: dict[str, Any] | None = None   # a JSON answer's schema beside tools: the reply is it or a call
    template_kwargs: dict[str, Any] = field(default_factory=dict)   # chat template switches (enable_thinking...)
    n: int = 1                           # choices, generated one after another
    parallel_tool_calls: bool = True     # False: at most one tool call per choice
    cache_scope: str = ""                # whose prefix-cache entries it may reuse (a tenant; "" = shared)
    priority: int = 0                    # higher leaves the queue first (FIFO within a priority)
    continue_final: bool = False         # the last message is the assistant's unfinished reply: continue it
    suffix: str = ""                     # a text completion's text after the gap (fill in the middle; "": none)
    score_prompts: bool = False          # echo with logprobs: each (non-empty) prompt's own tokens are scored
    # vLLM's truncate_prompt_tokens: each prompt keeps only its last this many tokens (-1: the context length)
    truncate_prompt: int | None = None
    # vLLM's prompt_logprobs: each prompt's own tokens scored, with this many alternatives (None: not asked)
    prompt_logprobs: int | None = None
