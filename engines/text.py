"""Token stream -> text stream, with stop sequences, EOS and max_tokens applied once for all engines."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from contracts.engine import GenerationChunk, Pause, StepResult


class StopMatcher:
    """Finds stop strings across chunk boundaries; holds back text that may begin one.

    With `calls` (a tool call's opening and closing markers, as the chat template writes them), the text
    of a call is not searched: a stop string ends the reply's text, while a call whose arguments happen to
    hold one (a ReAct agent's "Observation:" in a command) must reach the client whole, not cut into
    arguments that do not parse. `in_call`: the reply starts inside a call (the prompt opened it)."""

    def __init__(self, stops: Iterable[str], calls: tuple[str, str] | None = None, in_call: bool = False):
        self.stops = tuple(s for s in stops if s)
        self._held = ""
        self.matched: str | None = None   # the stop string found (the earliest in the text)
        self._calls = calls if calls is not None and all(calls) and self.stops else None
        self._in_call = in_call and self._calls is not None
        # the end of the text already let through, long enough to find a marker split across chunks
        self._tail = ""
        self._reach = max(map(len, self._calls)) - 1 if self._calls is not None else 0

    def feed(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to emit, stopped)."""
        buffer, self._held = self._held + text, ""
        out = ""
        while self._calls is not None:
            end = self._marker_end(buffer, self._calls[1] if self._in_call else self._calls[0])
            if self._in_call and end is None:   # inside a call to the end of the text: nothing to look for
                self._passed(buffer)
                return out + buffer, False
            hit = self._earliest(buffer)
            if end is None or (not self._in_call and hit is not None and hit[0] < end):
                break   # no marker, or a stop string starts before the call opens: it ends the reply
            out += buffer[:end]
            buffer = buffer[end:]
            self._in_call, self._tail = not self._in_call, ""
        piece, stopped = self._match(buffer)
        self._passed(piece)
        return out + piece, stopped

    def _earliest(self, buffer: str) -> tuple[int, str] | None:
        return min(((buffer.find(s), s) for s in self.stops if s in buffer), default=None)

    def _match(self, buffer: str) -> tuple[str, bool]:
        hit = self._earliest(buffer)
        if hit is not None:
            position, self.matched = hit
            return buffer[:position], True
        keep = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(buffer)), 0, -1):
                if buffer.endswith(stop[:n]):
                    keep = max(keep, n)
                    break
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep], False

    def _marker_end(self, buffer: str, marker: str) -> int | None:
        """Where `marker` ends in `buffer`, also when it began in text already let through; None if absent."""
        at = (self._tail + buffer).find(marker)
        return None if at < 0 else at + len(marker) - len(self._tail)

    def _passed(self, text: str) -> None:
        self._tail = (self._tail + text)[-self._reach:] if self._reach else ""

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


def untrimmed_detokenizer(tokenizer: Any) -> Any:
    """A fresh streaming detokenizer that keeps the first token's leading space. mlx-lm's BPE and
    SentencePiece detokenizers drop it (a habit from decoding whole prompts), but a generation continues
    text: /v1/completions of "Rome is" would read "a city" (prompt + text = "Rome isa city") and a
    prefilled reply would lose the space after the prefill. Chat answers trim their start themselves
    (engines/reply.py), after the template's blank lines."""
    detok = tokenizer.detokenizer
    detok.reset()
    if hasattr(detok, "trim_space"):          # SPMStreamingDetokenizer's own switch
        detok.trim_space = False
    if hasattr(detok, "_maybe_trim_space"):   # BPEStreamingDetokenizer has no switch: the identity instead
        detok._maybe_trim_space = _keep
    return detok


def _keep(text: str) -> str:
    return text


def stream_text(
    steps: Iterator[StepResult],
    tokenizer: Any,
    *,
    eos_token_ids: frozenset[int],
    max_tokens: int,
    stops: tuple[str, ...],
    prompt_tokens: int,
    cancelled: Any,
    ends: Callable[[str], bool] | None = None,
    calls: tuple[str, str] | None = None,
    in_call: bool = False,
) -> Iterator[GenerationChunk]:
    """Wraps an engine's steps; closes the engine generator when the request is finished. `ends`, fed
    the text token by token, says when the reply is complete at it (parallel_tool_calls false: its first
    tool call closed); the reply then finishes "stop" there, as at a stop string. `calls` / `in_call`: the
    tool-call markers inside which stop strings are not looked for (StopMatcher)."""
    detok = untrimmed_detokenizer(tokenizer)
    matcher = StopMatcher(stops, calls, in_call)
    produced = 0
    try:
        for step in steps:
            if isinstance(step, Pause):   # between prefill pieces: nothing to emit, the worker steps others
                yield step
                continue
            # token by token, as raw emits them: a stop string (or `ends`) ends the reply at the token that
            # completes it, so a speculative step's tokens past it are neither counted nor given logprobs
            kept: list[int] = []
            finish: str | None = None
            text, stopped, ended = "", False, False
            for token in step.tokens:
                if token in eos_token_ids:
                    finish = "stop"
                    break
                kept.append(token)
                produced += 1
                detok.add_token(token)
                piece, stopped = matcher.feed(detok.last_segment)
                text += piece
                ended = stopped or (ends is not None and ends(piece))
                if ended:
                    finish = "stop"
                    break
                if produced >= max_tokens:
                    finish = "length"
                    break
            if finish is not None and not ended:
                detok.finalize()   # the text held back for a next token that will not come
                piece, stopped = matcher.feed(detok.last_segment)
                text += piece if stopped else piece + matcher.flush()
                finish = "stop" if stopped else finish
            yield GenerationChunk(
                text=text, token_ids=kept, finish_reason=finish, step=step,
                prompt_tokens=prompt_tokens, completion_tokens=produced, logprobs=step.logprobs[: len(kept)],
                cached_tokens=step.cached_tokens, stop_sequence=matcher.matched if stopped else None,
            )
            if finish is not None:
                return
            if cancelled():
                break
        detok.finalize()
        yield GenerationChunk(
            text=matcher.flush() + detok.last_segment, token_ids=[], finish_reason="cancelled",
            prompt_tokens=prompt_tokens, completion_tokens=produced,
        )
    finally:
        steps.close()
