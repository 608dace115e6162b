"""Token stream -> text stream, with stop sequences, EOS and max_tokens applied once for all engines."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from contracts.engine import GenerationChunk, Pause, StepResult


class StopMatcher:
    """Finds stop strings across chunk boundaries; holds back text that may begin one."""

    def __init__(self, stops: Iterable[str]):
        self.stops = tuple(s for s in stops if s)
        self._held = ""
        self.matched: str | None = None   # the stop string found (the earliest in the text)

    def feed(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to emit, stopped)."""
        buffer = self._held + text
        hits = [(buffer.find(s), s) for s in self.stops if s in buffer]
        if hits:
            self._held = ""
            position, self.matched = min(hits)
            return buffer[:position], True
        keep = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(buffer)), 0, -1):
                if buffer.endswith(stop[:n]):
                    keep = max(keep, n)
                    break
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep], False

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
) -> Iterator[GenerationChunk]:
    """Wraps an engine's steps; closes the engine generator when the request is finished. `ends`, fed
    the text token by token, says when the reply is complete at it (parallel_tool_calls false: its first
    tool call closed); the reply then finishes "stop" there, as at a stop string."""
    detok = untrimmed_detokenizer(tokenizer)
    matcher = StopMatcher(stops)
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
