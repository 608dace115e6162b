"""Token stream -> text stream, with stop sequences, EOS and max_tokens applied once for all engines."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from contracts.engine import GenerationChunk, Pause, StepResult
from contracts.errors import InvalidRequestError

# GPT-2's and Qwen's end-of-text token: the separator between pretraining documents, so what a new one follows
END_OF_TEXT = "<|endoftext|>"


def start_of_text(tokenizer: Any) -> list[int]:
    """What an empty prompt is generated from (OpenAI's completions take `prompt: ""`): the tokenizer's
    beginning-of-sequence token, or where it has none (Qwen's) its end-of-text token. InvalidRequestError
    where it has neither: the model has nothing to continue."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None:
        return [bos]
    end_of_text = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    if isinstance(end_of_text, int) and end_of_text != getattr(tokenizer, "unk_token_id", None):
        return [end_of_text]
    raise InvalidRequestError("prompt must not be empty for this model: its tokenizer has no beginning-of-sequence "
                              f"or {END_OF_TEXT} token to generate from", param="prompt", code="empty_prompt")


# Qwen's fill-in-the-middle tokens (Qwen2.5-Coder on; Qwen3's tokenizers have them too), in the order a prompt
# holds them: the code before the gap, the code after it, then the gap the model writes
FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"


def fim_token_ids(tokenizer: Any) -> tuple[int, int, int] | None:
    """The tokenizer's ids of the three fill-in-the-middle tokens, or None where it lacks any of them."""
    unknown = getattr(tokenizer, "unk_token_id", None)
    ids = [tokenizer.convert_tokens_to_ids(token) for token in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)]
    if all(isinstance(i, int) and i != unknown for i in ids):
        return ids[0], ids[1], ids[2]
    return None


def fill_in_middle(tokenizer: Any, prefix: Sequence[int], suffix: Sequence[int]) -> list[int]:
    """A text completion's `suffix` (OpenAI's insert mode) as the model's fill-in-the-middle prompt:
    <|fim_prefix|> prefix <|fim_suffix|> suffix <|fim_middle|>, after which the model writes the gap.
    InvalidRequestError (param "suffix") where the tokenizer has no such tokens: the model was not trained to
    fill a gap, and a suffix it cannot see would be silently ignored."""
    ids = fim_token_ids(tokenizer)
    if ids is None:
        raise InvalidRequestError(f"suffix is not supported by this model: its tokenizer has no fill-in-the-middle "
                                  f"tokens ({FIM_PREFIX}, {FIM_SUFFIX}, {FIM_MIDDLE}), so it cannot write text that "
                                  "leads into a suffix; send the prompt without one", param="suffix",
                                  code="unsupported_parameter")
    start, middle, end = ids
    return [start, *prefix, middle, *suffix, end]


class StopMatcher:
    """Finds stop strings across chunk boundaries; holds back text that may begin one.

    `skip`: (opening, closing) marker pairs of the reply's parts that are no answer text (the thinking
    block, a tool call, as the chat template writes them), inside which stop strings are not looked for: a
    stop string ends the answer, while a call whose arguments happen to hold one (a ReAct agent's
    "Observation:" in a command) must reach the client whole, and a thinking model drafts what it answers.
    `inside`: the pair the reply starts in (the prompt opened the thinking block, or a forced call)."""

    def __init__(self, stops: Iterable[str], skip: Sequence[tuple[str, str]] = (),
                 inside: tuple[str, str] | None = None):
        self.stops = tuple(s for s in stops if s)
        self._held = ""
        self.matched: str | None = None   # the stop string found (the earliest in the text)
        self._skip = tuple(pair for pair in skip if all(pair)) if self.stops else ()
        self._inside = inside if inside in self._skip else None
        # the end of the text already let through, long enough to find a marker split across chunks
        self._tail = ""
        self._reach = max((len(marker) for pair in self._skip for marker in pair), default=1) - 1
        # False: stop strings are not looked for in the text fed now (vLLM's min_tokens: none ends the reply
        # before it); the parts' markers are still followed
        self.looking = True

    def feed(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to emit, stopped)."""
        buffer, self._held = self._held + text, ""
        out = ""
        while self._skip:
            if self._inside is not None:
                end = self._marker_end(buffer, self._inside[1])
                if end is None:   # inside to the end of the text: nothing to look for
                    self._passed(buffer)
                    return out + buffer, False
                pair = None
            else:
                opened = self._opening(buffer)
                hit = self._earliest(buffer)
                if opened is None or (hit is not None and hit[0] < opened[0]):
                    break   # no part opens, or a stop string starts before it has: it ends the reply
                end, pair = opened
            out += buffer[:end]
            buffer = buffer[end:]
            self._inside, self._tail = pair, ""
        piece, stopped = self._match(buffer)
        self._passed(piece)
        return out + piece, stopped

    def _opening(self, buffer: str) -> tuple[int, tuple[str, str]] | None:
        """(where its marker ends, the pair) of the first skipped part that opens in `buffer`."""
        found = [(end - len(pair[0]), end, pair) for pair in self._skip
                 if (end := self._marker_end(buffer, pair[0])) is not None]
        if not found:
            return None
        _, end, pair = min(found, key=lambda f: f[0])
        return end, pair

    def _earliest(self, buffer: str) -> tuple[int, str] | None:
        if not self.looking:
            return None
        return min(((buffer.find(s), s) for s in self.stops if s in buffer), default=None)

    def _match(self, buffer: str) -> tuple[str, bool]:
        if not self.looking:   # nothing held back for a stop string that could not count
            return buffer, False
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


def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet read back: the character a byte-level BPE vocabulary writes for each
    byte, to that byte (printable bytes stand for themselves, the others are shifted past 255)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(shifted)}}


BYTE_LEVEL = _byte_level_decoder()
SPM_SPACE = "\u2581".encode()


class TokenBytes:
    """The bytes each token of a vocabulary stands for. `tokenizer.decode([id])` turns a token holding part
    of a multi-byte character into U+FFFD; log-probabilities carry the real bytes, which a client joins to
    rebuild the text (OpenAI's `bytes`). Read from mlx-lm's streaming detokenizer's token map: byte-level
    BPE pieces through GPT-2's byte alphabet, SentencePiece pieces as bytes already (▁ a space); a vocabulary
    without a map falls back to the decoded text."""

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer
        self._map = getattr(tokenizer.detokenizer, "tokenmap", None)

    def __call__(self, token_id: int) -> bytes:
        piece = self._map[token_id] if self._map is not None and 0 <= token_id < len(self._map) else None
        if isinstance(piece, bytes):
            return piece.replace(SPM_SPACE, b" ")
        if isinstance(piece, str):
            return b"".join(bytes([BYTE_LEVEL[c]]) if c in BYTE_LEVEL else c.encode() for c in piece)
        return self._tokenizer.decode([token_id]).encode()


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
    skip: Sequence[tuple[str, str]] = (),
    inside: tuple[str, str] | None = None,
    hidden: frozenset[int] = frozenset(),
    min_tokens: int = 0,
) -> Iterator[GenerationChunk]:
    """Wraps an engine's steps; closes the engine generator when the request is finished. `ends`, fed
    the text token by token, says when the reply is complete at it (parallel_tool_calls false: its first
    tool call closed); the reply then finishes "stop" there, as at a stop string. `skip` / `inside`: the
    parts of the reply (thinking, tool calls) in which stop strings are not looked for (StopMatcher). `hidden`:
    tokens counted (and given logprobs) but not written into the text (vLLM's skip_special_tokens). `min_tokens`:
    no stop string ends the reply within its first this many tokens (vLLM's min_tokens)."""
    detok = untrimmed_detokenizer(tokenizer)
    matcher = StopMatcher(stops, skip, inside)
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
                if token not in hidden:
                    detok.add_token(token)
                    matcher.looking = produced >= min_tokens
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
