"""OpenAI chat.completion(.chunk) and text_completion bodies: answer, reasoning (as both
`reasoning_content` and `reasoning`), tool calls (`delta.tool_calls` entries the openai SDK accumulates
by index: a function call's id and name, then its arguments as they are written; a custom tool's call
whole), log-probabilities, several choices and usage."""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from pydantic_core import from_json
from starlette.responses import JSONResponse

from contracts.chat import CallDelta, PromptLogprobs, TokenLogprob, ToolCall, TopLogprob
from contracts.engine import GenerationChunk

from .errors import APIError
from .record import ChoiceReply, RequestRecord, answer_logprobs
from .schemas import (
    CUSTOM_INPUT,
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatDelta,
    ChoiceLogprobs,
    Completion,
    CompletionTokensDetails,
    CompletionChoice,
    CompletionLogprobs,
    CustomCallOut,
    CustomToolCallDelta,
    CustomToolCallOut,
    FunctionCallDelta,
    FunctionCallOut,
    PromptLogprobOut,
    PromptLogprobsOut,
    PromptTokensDetails,
    TokenLogprobOut,
    ToolCallDelta,
    ToolCallOut,
    TopLogprobOut,
    Usage,
)
from .sse import DONE, SSE, StreamFormat, event


def usage(record: RequestRecord) -> Usage:
    prompt, completion = record.prompt_tokens, record.completion_tokens
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                 prompt_tokens_details=PromptTokensDetails(cached_tokens=record.cached_tokens),
                 completion_tokens_details=CompletionTokensDetails(reasoning_tokens=record.reasoning_tokens))


def _bytes(token: TokenLogprob | TopLogprob) -> list[int]:
    """The token's own bytes (a piece of a multi-byte character is not the U+FFFD its text reads as)."""
    return list(token.raw or token.token.encode("utf-8"))


def chat_logprobs(tokens: list[TokenLogprob]) -> ChoiceLogprobs:
    return ChoiceLogprobs(content=[
        TokenLogprobOut(token=t.token, logprob=t.logprob, bytes=_bytes(t),
                        top_logprobs=[TopLogprobOut(token=a.token, logprob=a.logprob, bytes=_bytes(a))
                                      for a in t.top])
        for t in tokens
    ])


def completion_logprobs(tokens: list[TokenLogprob], start: int = 0,
                        prompt: PromptLogprobs | None = None, prompt_top: int | None = None) -> CompletionLogprobs:
    """The legacy shape of generated `tokens` (offsets from `start`: the text before them), after an echoed
    prompt's own tokens where given (offsets from 0; the first with null logprobs, as OpenAI's), with at most
    `prompt_top` of their alternatives (the prompt may have been scored with more, for prompt_logprobs)."""
    entries: list[tuple[str, float | None, dict[str, float] | None, int]] = []
    if prompt is not None:
        at = len(prompt.first)
        entries.append((prompt.first, None, None, 0))
        for t in prompt.scored:
            entries.append((t.token, t.logprob, {a.token: a.logprob for a in t.top[:prompt_top]}, at))
            at += len(t.token)
    at = start
    for t in tokens:
        entries.append((t.token, t.logprob, {a.token: a.logprob for a in t.top}, at))
        at += len(t.token)
    return CompletionLogprobs(tokens=[e[0] for e in entries], token_logprobs=[e[1] for e in entries],
                              top_logprobs=[e[2] for e in entries], text_offset=[e[3] for e in entries])


def vllm_prompt_logprobs(prompt: PromptLogprobs, top: int) -> PromptLogprobsOut:
    """vLLM's prompt_logprobs: null for the first token (nothing precedes it), then per token a dict by token
    id of the token itself (its rank among the vocabulary) and the `top` likeliest (ranks 1 to top)."""
    out: PromptLogprobsOut = [None]
    for t in prompt.scored:
        entry = {str(t.token_id): PromptLogprobOut(logprob=t.logprob, rank=t.rank, decoded_token=t.token)}
        for rank, a in enumerate(t.top[:top], 1):
            entry.setdefault(str(a.token_id), PromptLogprobOut(logprob=a.logprob, rank=rank, decoded_token=a.token))
        out.append(entry)
    return out


def custom_input(arguments: str) -> str:
    """A custom tool's input: the one string argument of the function the model was offered for it. A
    call that max_tokens cut off keeps the text written so far."""
    try:
        value = from_json(arguments, allow_partial="trailing-strings") if arguments.strip() else {}
    except ValueError:
        return arguments
    if not isinstance(value, dict):
        return arguments
    if isinstance(value.get(CUSTOM_INPUT), str):
        return value[CUSTOM_INPUT]
    strings = [v for v in value.values() if isinstance(v, str)]
    if len(value) <= 1:   # none, or one argument the model named otherwise
        return strings[0] if strings else ""
    return arguments


def tool_call_out(call: ToolCall, customs: frozenset[str]) -> ToolCallOut | CustomToolCallOut:
    """A call as the client offered its tool: a custom tool's as a custom call of its input text."""
    if call.name in customs:
        return CustomToolCallOut(id=call.id, custom=CustomCallOut(name=call.name, input=custom_input(call.arguments)))
    return ToolCallOut(id=call.id, function=FunctionCallOut(name=call.name, arguments=call.arguments))


def tool_calls_out(calls: list[ToolCall], customs: frozenset[str] = frozenset()) -> list[ToolCallOut | CustomToolCallOut] | None:
    return [tool_call_out(c, customs) for c in calls] or None


def _mean_logprob(choice: ChoiceReply) -> float:
    """A choice's log-probability per token; -inf for one without tokens (nothing to rank it by)."""
    return sum(t.logprob for t in choice.logprobs) / len(choice.logprobs) if choice.logprobs else -math.inf


def best_choices(choices: list[ChoiceReply], n: int, best_of: int) -> list[ChoiceReply]:
    """best_of choices per prompt (in prompt order) cut to each prompt's n of highest mean token log-probability
    (OpenAI's best_of), likeliest first, renumbered prompt index x n + i."""
    kept: list[ChoiceReply] = []
    for start in range(0, len(choices), best_of):
        ranked = sorted(choices[start:start + best_of], key=_mean_logprob, reverse=True)[:n]
        kept += [replace(choice, index=len(kept) + i) for i, choice in enumerate(ranked)]
    return kept


@dataclass
class OpenAIRenderer:
    """`chat` selects chat.completion(.chunk) vs text_completion; `logprobs` whether choices carry them."""

    stream_format: ClassVar[StreamFormat] = SSE

    chat: bool
    model: str
    logprobs: bool = False
    # a forced tool_choice: the reply is a call, so its stream opens with no content, as OpenAI's tool-call
    # streams do (openai-agents turns an opening `content: ""` into an empty message beside the call)
    call_only: bool = False
    custom_tools: frozenset[str] = frozenset()   # the custom tools offered: their calls come back as custom calls
    n: int = 1          # choices returned per prompt (text completions)
    best_of: int = 1    # choices generated per prompt: above n, the n likeliest are returned (best_choices)
    echo: tuple[str, ...] = ()   # text completions' `echo`: each prompt's text, put before its choices' text
    # vLLM's stream_options.continuous_usage_stats (with include_usage): every chunk carries the usage so far
    continuous_usage: bool = False
    include_reasoning: bool = True   # vLLM's include_reasoning false: the thinking is left out of the reply
    top_logprobs: int = 0   # alternatives per token of an echoed prompt (completions' logprobs)
    prompt_logprobs: int | None = None   # vLLM's prompt_logprobs: its alternatives per prompt token (None: not asked)
    _record: RequestRecord | None = field(default=None, init=False, repr=False)   # the stream's, once opened
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.id:
            self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex

    # ---- full body ----
    def full(self, record: RequestRecord) -> dict[str, Any]:
        u = usage(record)
        if self.chat:
            # a chat choice's logprobs are its answer's, as OpenAI's: not the thinking's or a call's markup (the
            # blank line before calls, which `content` drops, may share a token with the answer's last word)
            choices = [ChatChoice(index=c.index, message=self._message(c), finish_reason=c.finish_reason,
                                  logprobs=chat_logprobs(c.answer_logprobs) if self.logprobs else None)
                       for c in record.choices]
            # vLLM's prompt_logprobs of a chat: its one prompt's, at the top level
            scored = next((c.prompt_logprobs for c in record.choices if c.prompt_logprobs is not None), None)
            body = ChatCompletion(id=self.id, created=self.created, model=self.model, choices=choices, usage=u,
                                  prompt_logprobs=self._prompt_logprobs(scored))
            return body.model_dump(exclude={"prompt_logprobs"} if self.prompt_logprobs is None else None)
        kept = best_choices(record.choices, self.n, self.best_of) if self.best_of > self.n else record.choices
        texts = [CompletionChoice(index=c.index, text=self._echoed(c) + c.content, finish_reason=c.finish_reason,
                                  logprobs=completion_logprobs(c.logprobs, len(self._echoed(c)),
                                                               c.prompt_logprobs if self._echoed(c) else None,
                                                               self.top_logprobs)
                                  if self.logprobs else None,
                                  prompt_logprobs=self._prompt_logprobs(c.prompt_logprobs))
                 for c in kept]
        body = Completion(id=self.id, created=self.created, model=self.model, choices=texts, usage=u)
        return body.model_dump(exclude={"choices": {"__all__": {"prompt_logprobs"}}}
                               if self.prompt_logprobs is None else None)

    def _prompt_logprobs(self, scored: PromptLogprobs | None) -> PromptLogprobsOut | None:
        if self.prompt_logprobs is None or scored is None:
            return None
        return vllm_prompt_logprobs(scored, self.prompt_logprobs)

    def _echoed(self, choice: ChoiceReply) -> str:
        """The prompt text a choice's text begins with under `echo` ("" without it)."""
        return self.echo[choice.prompt] if self.echo else ""

    def _message(self, choice: ChoiceReply) -> AssistantMessage:
        reasoning = (choice.reasoning_text if self.include_reasoning else "") or None
        content = choice.content
        return AssistantMessage(content=content if content or not choice.tool_calls else None,
                                reasoning_content=reasoning, reasoning=reasoning,
                                tool_calls=tool_calls_out(choice.tool_calls, self.custom_tools))

    # ---- stream ----
    def opening(self, record: RequestRecord) -> list[bytes]:
        self._record = record   # the running usage each chunk carries under continuous_usage
        return []

    def _event(self, chunk: dict[str, Any]) -> bytes:
        """A choice's chunk as an event; under continuous_usage with the usage so far (this chunk's tokens
        counted: the record takes a chunk before it is rendered), as vLLM's streams carry it."""
        if self.continuous_usage and self._record is not None:
            chunk = {**chunk, "usage": usage(self._record).model_dump()}
        return event(chunk)

    def choice_started(self, choice: ChoiceReply) -> list[bytes]:
        """Chat choices open with the assistant role (and empty content, unless the reply is a call), as
        OpenAI's do; a text completion's choice under `echo` with its prompt's text."""
        if not self.chat:
            echoed = self._echoed(choice)
            if not echoed:
                return []
            scored = choice.prompt_logprobs if self.logprobs else None
            body = CompletionChoice(index=choice.index, text=echoed,
                                    logprobs=completion_logprobs([], prompt=scored, prompt_top=self.top_logprobs)
                                    if scored is not None else None)
            return [self._event(Completion(id=self.id, created=self.created, model=self.model,
                                           choices=[body]).model_dump(exclude={"usage"}))]
        opening = ChatDelta(role="assistant", content=None if self.call_only else "")
        return [self._event(self._chunk(choice.index, opening, None, None))]

    def chunk(self, choice: ChoiceReply, chunk: GenerationChunk) -> list[bytes]:
        if chunk.reasoning and not self.include_reasoning:
            chunk = replace(chunk, reasoning="")
        calls = [out for out in map(self._call_delta, chunk.call_deltas) if out is not None] if self.chat else []
        has_output = chunk.text or chunk.reasoning or calls or chunk.finish_reason is not None
        logprobs = (answer_logprobs(chunk) if self.chat else chunk.logprobs) if self.logprobs else None
        if not has_output and not logprobs:
            return []   # e.g. text held back while it may be the start of a stop sequence
        if not self.chat:
            # the record already holds this chunk; an echoed prompt comes before the choice's text
            start = len(self._echoed(choice)) + sum(map(len, choice.text)) - len(chunk.text)
            body = CompletionChoice(index=choice.index, text=chunk.text, finish_reason=chunk.finish_reason,
                                    logprobs=completion_logprobs(logprobs, start) if logprobs is not None else None)
            return [self._event(Completion(id=self.id, created=self.created, model=self.model,
                                           choices=[body]).model_dump(exclude={"usage"}))]
        delta = ChatDelta(content=chunk.text or None, reasoning_content=chunk.reasoning or None,
                          reasoning=chunk.reasoning or None, tool_calls=calls or None)
        if chunk.finish_reason is None or not (chunk.text or chunk.reasoning or calls or logprobs):
            return [self._event(self._chunk(choice.index, delta, chunk.finish_reason, logprobs))]
        # the finish in a chunk of its own with an empty delta, as OpenAI ends a choice: the openai SDK's
        # chat.completions.stream() reads a call as done when a later chunk finishes it, so a finish beside the
        # last call's delta never fired `tool_calls.function.arguments.done`
        return [self._event(self._chunk(choice.index, delta, None, logprobs)),
                self._event(self._chunk(choice.index, ChatDelta(), chunk.finish_reason, None))]

    def _call_delta(self, delta: CallDelta) -> ToolCallDelta | CustomToolCallDelta | None:
        """A call's progress as OpenAI streams it: the opening with id, type and name, then more arguments;
        a custom tool's call whole once done, {"type": "custom", "custom": {...}} (its input is text, not the
        JSON being streamed). None: nothing to send."""
        if delta.name in self.custom_tools:
            if delta.done is None:
                return None
            return CustomToolCallDelta(index=delta.index, id=delta.id,
                                       custom=CustomCallOut(name=delta.name, input=custom_input(delta.done.arguments)))
        if delta.opens:
            return ToolCallDelta(index=delta.index, id=delta.id, type="function",
                                 function=FunctionCallDelta(name=delta.name, arguments=delta.arguments))
        if not delta.arguments:
            return None
        return ToolCallDelta(index=delta.index, function=FunctionCallDelta(arguments=delta.arguments))

    def closing(self, record: RequestRecord, include_usage: bool) -> list[bytes]:
        frames = []
        if include_usage:
            u = usage(record)
            body = (ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=[], usage=u)
                    if self.chat else Completion(id=self.id, created=self.created, model=self.model, choices=[], usage=u))
            frames.append(event(body.model_dump()))
        return [*frames, DONE]

    def stream_error(self, err: APIError) -> list[bytes]:
        return [event(err.body()), DONE]

    def error_response(self, err: APIError, headers: dict[str, str] | None = None) -> JSONResponse:
        return err.response(headers)

    def _chunk(self, index: int, delta: ChatDelta, finish_reason: str | None,
               logprobs: list[TokenLogprob] | None) -> dict[str, Any]:
        choice = ChatChunkChoice(index=index, delta=delta, finish_reason=finish_reason,
                                 logprobs=chat_logprobs(logprobs) if logprobs is not None else None)
        chunk = ChatCompletionChunk(id=self.id, created=self.created, model=self.model,
                                    choices=[choice]).model_dump(exclude={"usage"})
        chunk["choices"][0]["delta"] = delta.model_dump(exclude_none=True)
        return chunk
