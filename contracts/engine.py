"""The one engine interface and what flows through it: steps, chunks, cancellation, the hand-off rule.

The router and the monitor only ever see StepResults; the gateway only ever sees a Backend.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Iterator, Protocol, Sequence

from .sampling import SamplingParams


@dataclass
class StepResult:
    """One engine step (a decode step, or a draft+verify cycle)."""

    tokens: list[int]          # tokens emitted by this step, in order
    drafted: int = 0           # draft tokens proposed (0 for raw)
    accepted: int = 0          # draft tokens accepted by the verify
    seconds: float = 0.0       # wall time of the step
    engine: str = "raw"        # engine that produced the step (differs after a mid-request fallback)
    accepted_positions: list[bool] = field(default_factory=list)  # per draft position, accepted?


@dataclass(frozen=True)
class FallbackRule:
    """Mid-request hand-off of a speculative engine to raw (docs/design.md "Router and online monitor").

    After at least `window` steps, if the mean accepted draft tokens over the last `window` steps is
    below `min_accepted` (the break-even α* = c − 1 from the monitor's cost ratio, minus a margin for
    hysteresis and the window's sampling noise), the engine stops drafting and decodes the rest of the
    request like raw, reusing the target caches (no re-prefill). Once handed off, a request never
    switches back (no flapping).
    """

    window: int = 8
    min_accepted: float = 0.5


class CancelToken:
    """A flag the decode loop polls once per step."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


class Engine(Protocol):
    """The one engine interface. The router and monitor only ever see StepResults."""

    name: str

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        cancel: CancelToken,
        fallback: FallbackRule | None = None,
    ) -> Iterator[StepResult]:
        """Prefill, then yield one StepResult per step until cancelled or the caller stops.
        Speculative engines hand the rest of the request to raw decoding when `fallback` trips."""
        ...


@dataclass
class GenerationChunk:
    """What the runtime hands the gateway per engine step: detokenized, stop/length applied once."""

    text: str                          # new text since the previous chunk ("" is allowed)
    token_ids: list[int]               # tokens this chunk accounts for (after truncation)
    finish_reason: str | None = None   # None while running; "stop" | "length" | "cancelled" at the end
    step: StepResult | None = None     # the engine step behind this chunk (None for the final marker)
    prompt_tokens: int = 0
    completion_tokens: int = 0         # running total


class Backend(Protocol):
    """What the gateway needs from the loaded model (implemented by engines.runtime.Runtime).

    All methods except the properties run on the scheduler's single worker thread.
    """

    model_id: str
    engine_names: tuple[str, ...]   # engines loaded, always including "raw"
    context_length: int
    default_temperature: float      # what a request that leaves `temperature` unset decodes with

    def encode_chat(self, messages: list[dict]) -> list[int]: ...

    def encode_prompt(self, prompt: str) -> list[int]: ...

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        engine: str,
        cancel: CancelToken,
        fallback: FallbackRule | None = None,
    ) -> Iterator[GenerationChunk]: ...

    def memory_bytes(self) -> dict[str, int]: ...
