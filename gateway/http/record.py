"""One request's outcome as it streams in: the route, each choice's answer, reasoning, tool calls and
log-probabilities, token counts and timings (reported to the metrics once, at the end)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from contracts.chat import ANSWER, REASONING, PromptLogprobs, TokenLogprob, ToolCall
from contracts.engine import GenerationChunk
from gateway.observability.metrics import RequestMeter
from gateway.routing.interface import RouteDecision
from gateway.worker.pipeline import ChoiceStart, Routed

from .state import GatewayState

CLIENT_CLOSED = 499  # nginx's "client closed request", used only in metrics


def answer_logprobs(chunk: GenerationChunk) -> list[TokenLogprob]:
    """The chunk's log-probabilities of answer tokens (not reasoning, not tool calls or markers); every
    token's where the reply is not split into parts (all of it is answer)."""
    if not chunk.parts:
        return list(chunk.logprobs)
    return [lp for lp, part in zip(chunk.logprobs, chunk.parts) if part == ANSWER]


@dataclass
class ChoiceReply:
    index: int
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    completion_tokens: int = 0
    stop_sequence: str | None = None   # the stop string that ended it
    reasoning_tokens: int = 0          # of completion_tokens, those inside the thinking block
    answer_logprobs: list[TokenLogprob] = field(default_factory=list)   # of logprobs, the answer text's
    prompt: int = 0                    # which of the request's prompts it answers (text completions)
    prompt_logprobs: PromptLogprobs | None = None   # its prompt's own tokens scored (echo with logprobs)

    @property
    def content(self) -> str:
        text = "".join(self.text)
        # the template puts a blank line between the answer and its tool calls: not part of the answer
        return text.rstrip() if self.tool_calls else text

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)


class RequestRecord:
    """Timings, tokens and outcome of one request, reported to the metrics once at the end."""

    def __init__(self, state: GatewayState, endpoint: str):
        self.state = state
        self.endpoint = endpoint
        self.started = time.perf_counter()
        self.decision: RouteDecision | None = None
        self.meter: RequestMeter | None = None
        self.prompt_tokens = 0               # every prompt's, once (not once per choice)
        self._cached: dict[int, int] = {}    # per prompt, the tokens the prefix cache served it
        self._prompt = 0                     # the prompt the choice being taken answers
        self.first_token_s: float | None = None
        self.choices: list[ChoiceReply] = []
        self._done = False

    @property
    def completion_tokens(self) -> int:
        return sum(choice.completion_tokens for choice in self.choices)

    @property
    def reasoning_tokens(self) -> int:
        return sum(choice.reasoning_tokens for choice in self.choices)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens the prefix cache served: per prompt its best choice's (a later choice of one prompt
        finds it cached whole, and it is counted once), summed over the prompts."""
        return sum(self._cached.values())

    def _cache_hit(self, chunk: GenerationChunk) -> None:
        self._cached[self._prompt] = max(self._cached.get(self._prompt, 0), chunk.cached_tokens)

    @property
    def finish_reason(self) -> str | None:
        return self.choices[-1].finish_reason if self.choices else None

    def routed(self, item: Routed) -> None:
        self.decision = item.decision
        self.prompt_tokens = item.prompt_tokens
        self.meter = self.state.metrics.start_generation(item.decision, time.perf_counter() - self.started)

    def prefilled(self, early: list[ChoiceStart | GenerationChunk]) -> None:
        """The prompt's cache hit, from the first chunk before it is taken: a stream's opening frame
        (Anthropic's message_start, which carries the usage of the prompt) is rendered before it."""
        for item in early:
            if isinstance(item, ChoiceStart):
                self._prompt = item.prompt
            else:
                self._cache_hit(item)

    def take(self, item: ChoiceStart | GenerationChunk) -> ChoiceReply:
        """Record a worker item; returns the choice it belongs to."""
        if isinstance(item, ChoiceStart):
            self._prompt = item.prompt
            self.choices.append(ChoiceReply(item.index, prompt=item.prompt, prompt_logprobs=item.prompt_logprobs))
            return self.choices[-1]
        if not self.choices:
            self.choices.append(ChoiceReply(0))
        choice = self.choices[-1]
        chunk = item
        if chunk.step is not None and self.meter is not None:
            self.meter.step(chunk.step)  # per-step speculation metrics
        if self.first_token_s is None and chunk.token_ids:
            self.first_token_s = time.perf_counter() - self.started
        choice.completion_tokens = chunk.completion_tokens or (choice.completion_tokens + len(chunk.token_ids))
        self._cache_hit(chunk)
        if chunk.finish_reason is not None:
            choice.finish_reason = chunk.finish_reason
            choice.stop_sequence = chunk.stop_sequence
        choice.text.append(chunk.text)
        if chunk.reasoning:
            choice.reasoning.append(chunk.reasoning)
        choice.tool_calls.extend(chunk.tool_calls)
        choice.logprobs.extend(chunk.logprobs)
        choice.reasoning_tokens += chunk.parts.count(REASONING)
        choice.answer_logprobs.extend(answer_logprobs(chunk))
        return choice

    def done(self, status: int, disconnected: bool = False) -> None:
        if self._done:
            return
        self._done = True
        metrics = self.state.metrics
        engine = self.decision.engine if self.decision else None
        klass = self.decision.klass if self.decision else None
        if disconnected:
            metrics.client_disconnects.labels(self.endpoint).inc()
            status = CLIENT_CLOSED
        metrics.count_request(self.endpoint, engine, klass, status)
        if self.decision is not None:
            finish = self.finish_reason if status == 200 else ("cancelled" if disconnected else "error")
            metrics.count_generation(
                self.decision.engine, self.decision.klass, self.prompt_tokens, self.completion_tokens,
                finish, self.first_token_s, time.perf_counter() - self.started,
            )
