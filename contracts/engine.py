"""The one engine interface and what flows through it: steps, chunks, cancellation, the hand-off rule.

The router and the monitor only ever see StepResults; the gateway only ever sees a Backend.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from .chat import CallDelta, ChatPrompt, PromptLogprobs, ReplyFormat, TokenLogprob, ToolCall
from .errors import InvalidRequestError
from .sampling import SamplingParams


@dataclass
class StepResult:
    """One engine step (a decode step, or a draft+verify cycle)."""

    tokens: list[int]          # tokens emitted by this step, in order
    drafted: int = 0           # draft tokens proposed (0 for raw)
    accepted: int = 0          # draft tokens accepted by the verify
    seconds: float = 0.0       # wall time of the step
    engine: str = "raw"        # engine that produced the step (changes when the request switches engine)
    accepted_positions: list[bool] = field(default_factory=list)  # per draft position, accepted?
    probes: dict[str, list[float]] = field(default_factory=dict)  # engine -> probed alpha per would-be verify
    probing: bool = False      # the step also kept other engines in sync: its time is not the engine's cost
    logprobs: list[TokenLogprob] = field(default_factory=list)  # per emitted token, when the request asked
    cached_tokens: int = 0     # first step only: prompt tokens restored from the prefix cache
    batch_rows: int = 1        # requests that shared this step's forward (raw continuous batching)
    interleaved: bool = False  # other requests ran on the worker meanwhile: its wall time is not the engine's


@dataclass(frozen=True)
class SwitchRule:
    """When a request may change engine mid-way, on evidence (docs/design.md "Router and online monitor").

    The running engine E keeps a window of its accepted draft tokens per verify (alpha). Every engine
    E' in `targets` is either raw (alpha = 0, cost 1: needs no evidence) or a speculative engine
    whose alpha is *probed* on the tokens the request actually produces while its state is kept in
    sync (the first `probe_steps` steps). E hands the rest of the request to the E' predicted fastest
    once E's window mean falls below its break-even against E',
        alpha* = c_E * (1 + alpha_E') / c_E' - 1,
    by `margin` plus `evidence_z` standard errors of the difference of the two window means. Against
    raw that is the classic hand-off, alpha_E < c_E - 1. No re-prefill: engines share the target
    caches, so the switch is lossless. A request handed to raw stays on raw (no flapping).
    """

    window: int = 8                                   # verify steps of evidence per engine
    margin: float = 0.1                               # tokens below break-even (hysteresis)
    evidence_z: float = 1.645                         # standard errors of noise to clear as well
    costs: Mapping[str, float] = field(default_factory=dict)     # c_e per engine (raw: 1.0)
    step_sd: Mapping[str, float] = field(default_factory=dict)   # per-step sd of alpha until a window has 2+ samples
    targets: tuple[str, ...] = ("raw",)               # engines the request may switch to
    probe_steps: int = 0                              # steps during which other engines are probed (0: none)
    probe_every: int = 1                              # DDTree probe interval within that phase (its drafter is dearer)
    batch_costs: tuple[float, ...] = ()               # c(B), B = 1, 2, ...: a raw step shared by B requests
    raw_cost_now: float = 1.0                         # what a raw token costs this request now (see batched)
    expected: Mapping[str, float] = field(default_factory=dict)     # the arm's alpha per engine (class, decoding)
    persistence: Mapping[str, float] = field(default_factory=dict)  # share of a window's deviation from it that lasts

    def cost(self, engine: str) -> float:
        return self.raw_cost_now if engine == "raw" else float(self.costs.get(engine, 1.0))

    def marginal_raw_cost(self, others: int) -> float:
        return marginal_batch_cost(self.batch_costs, others)

    def batched(self, others: int) -> "SwitchRule":
        """This rule with raw priced at its marginal cost in a batch with `others` requests: under load,
        a speculative request hands over to raw (and so to the batch) once its window says the batch
        makes tokens cheaper than its own cycles do."""
        cost = self.marginal_raw_cost(others)
        return self if cost == self.raw_cost_now else replace(self, raw_cost_now=cost)

    def spread(self, engine: str) -> float:
        """Per-step sd of an engine's accepted tokens (raw accepts nothing, exactly)."""
        return 0.0 if engine == "raw" else float(self.step_sd.get(engine, 0.5))

    def carry(self, engine: str, windows: float = 1.0) -> float:
        """How much of a dip's deviation from the arm's mean the rest of the request keeps (0..1), for a
        dip that has lasted `windows` windows; 1 (face value) for an engine without an arm mean. With
        p the learned share one window keeps, k windows of a dip estimate the request's own level as
        a per-request effect seen through k windows of noise: k·p / (k·p + 1 - p) (p at k = 1, towards
        1 as the dip lasts), so a one-window dip is discounted and a lasting collapse is not."""
        if engine == "raw" or engine not in self.expected:
            return 1.0
        share = min(1.0, max(0.0, float(self.persistence.get(engine, 1.0))))
        if share >= 1.0:
            return 1.0
        k = max(1.0, float(windows))
        return k * share / (k * share + 1.0 - share)

    def projected(self, engine: str, window_mean: float, windows: float = 1.0) -> float:
        """The engine's alpha over the rest of the request, from the mean of its last `windows` windows
        of a dip: the arm's mean plus the share of the deviation that lasts (learned per engine and
        decoding mode: on the demo family a greedy dip is mostly gone a window later, a sampled one
        lasts longer), else the window as it is."""
        if engine == "raw" or engine not in self.expected:
            return window_mean
        mean = float(self.expected[engine])
        return mean + self.carry(engine, windows) * (window_mean - mean)

    def break_even(self, engine: str, other: str, other_accepted: float = 0.0) -> float:
        """alpha at which `engine` and `other` (with alpha `other_accepted`) decode equally fast."""
        return self.cost(engine) * (1.0 + other_accepted) / self.cost(other) - 1.0

    def threshold(self, engine: str, other: str, other_accepted: float = 0.0, windows: float = 1.0) -> float:
        """The projected alpha of `engine` (from `windows` windows) below which the request moves to
        `other` (whose projected alpha is `other_accepted`, from one window): break-even, minus the
        margin, minus evidence_z standard errors of the two projections (a mean's noise enters a
        projection scaled by its carry)."""
        scale = self.cost(engine) / self.cost(other)  # break-even moves by this per token of the other's alpha
        k = max(1.0, float(windows))
        mine = self.carry(engine, k) * self.spread(engine) / math.sqrt(k)
        theirs = scale * self.carry(other) * self.spread(other)
        noise = self.evidence_z * math.sqrt((mine**2 + theirs**2) / self.window)
        return self.break_even(engine, other, other_accepted) - self.margin - noise


MIN_ROW_COST = 0.02   # a batch row is never free (its sampling, KV write, logits): the floor of a marginal cost


def checked_token_ids(ids: Sequence[int], vocab: int) -> list[int]:
    """A prompt a client tokenized itself: every id must be in the model's vocabulary (an id past it would
    index outside the embedding table), else the request's error, naming the first such id."""
    bad = next((token for token in ids if not 0 <= token < vocab), None)
    if bad is not None:
        raise InvalidRequestError(f"prompt: token id {bad} is not in this model's vocabulary (0 to {vocab - 1})",
                                  param="prompt", code="invalid_token_id")
    return list(ids)


def marginal_batch_cost(costs: Sequence[float], others: int) -> float:
    """What one more raw token costs the worker when `others` requests are generating besides this one
    and all of them decode raw in one batch: c(others + 1) - c(others), in single raw steps, from the
    table costs[B - 1] = c(B) (1.0 with no table or nobody else; beyond the table its last slope goes on).
    A learned table is only non-decreasing (noise is clipped up), so two sizes can cost the same; the
    price is then MIN_ROW_COST, not 0, which break-evens divide by."""
    if others <= 0 or len(costs) < 2:
        return 1.0

    def c(rows: int) -> float:
        if rows <= len(costs):
            return costs[rows - 1]
        return costs[-1] + (rows - len(costs)) * (costs[-1] - costs[-2])

    return max(MIN_ROW_COST, min(1.0, c(others + 1) - c(others)))


class CancelToken:
    """Flags the decode loop polls once per step: stop for good (`cancel`), or give the caches back and wait
    (`ask_release`: the scheduler's memory budget needs them; the request yields `Released` and later resumes)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._release = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def ask_release(self) -> None:
        self._release.set()

    @property
    def release_asked(self) -> bool:
        return self._release.is_set()

    def released(self) -> None:
        """The request gave its caches back: the ask is answered."""
        self._release.clear()


class Engine(Protocol):
    """The one engine interface. The router and monitor only ever see StepResults."""

    name: str

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        cancel: CancelToken,
        switch: SwitchRule | None = None,
        peers: Mapping[str, Engine] | None = None,
        prefix: Any = None,
        written: Sequence[int] = (),
    ) -> Iterator[StepResult]:
        """Prefill, then yield one StepResult per step until cancelled or the caller stops. With a
        `switch` rule the request may move mid-way to raw or to one of the `peers` (the other
        loaded speculative engines, which share the target). `prefix` (engines.prefill.PrefixPlan)
        lets the prefill resume from the prefix cache. `written`: the reply's tokens so far, of a request that
        gave its caches back (Released): prefilled after the prompt, and the steps go on after them."""
        ...


@dataclass(frozen=True)
class Pause:
    """Yielded by an engine (and passed through untouched by every layer above it) between pieces of
    a long prefill: the worker may step the other running requests before the next piece. It carries
    no output; the scheduler posts nothing for it."""

    done: int    # prompt rows prefilled so far
    total: int   # rows this prefill computes


@dataclass(frozen=True)
class Released(Pause):
    """A Pause after which the request holds no caches (it answered CancelToken.ask_release): the scheduler
    parks it until its memory fits again. Resumed, it prefills its prompt and the tokens it already wrote
    and goes on from there (engines/resume.py); the reply's text and its stream are untouched."""


@dataclass
class GenerationChunk:
    """What the runtime hands the gateway per engine step: detokenized, stop/length applied once.
    With a ReplyFormat the text is split: `text` is the answer, `reasoning` the thinking, and complete
    tool calls come out as `tool_calls`."""

    text: str                          # new answer text since the previous chunk ("" is allowed)
    token_ids: list[int]               # tokens this chunk accounts for (after truncation)
    finish_reason: str | None = None   # None while running; "stop" | "length" | "cancelled" | "tool_calls"
    step: StepResult | None = None     # the engine step behind this chunk (None for the final marker)
    prompt_tokens: int = 0
    completion_tokens: int = 0         # running total
    reasoning: str = ""                # new reasoning text
    tool_calls: list[ToolCall] = field(default_factory=list)   # tool calls completed in this chunk
    call_deltas: list[CallDelta] = field(default_factory=list)  # the calls' progress, for streams
    logprobs: list[TokenLogprob] = field(default_factory=list)  # per token of token_ids, when asked
    cached_tokens: int = 0             # prompt tokens served from the prefix cache (first chunk)
    stop_sequence: str | None = None   # the request's stop string that ended the generation (finish "stop")
    parts: tuple[str, ...] = ()        # per token of token_ids, the reply part it is in (contracts.chat
                                       # REASONING / ANSWER / MARKUP); empty when the reply is not split


@dataclass(frozen=True)
class PrefixHint:
    """How a request may use the prefix cache: whose entries it may reuse (a tenant; "" when shared)
    and token boundaries worth a snapshot besides the end of its prompt."""

    scope: str = ""
    points: tuple[int, ...] = ()


class Backend(Protocol):
    """What the gateway needs from the loaded model (implemented by engines.runtime.Runtime).

    All methods except the properties run on the scheduler's single worker thread.
    """

    model_id: str
    engine_names: tuple[str, ...]   # engines loaded, always including "raw"
    context_length: int
    default_temperature: float      # what a request that leaves `temperature` unset decodes with
    embedding_size: int             # length of an embedding (the target's hidden size)

    def chat_prompt(self, messages: list[dict], tools: list[dict] | None = None, tool_choice: Any = None,
                    template_kwargs: dict[str, Any] | None = None, continue_final: bool = False, *,
                    answer_schema: dict[str, Any] | None = None) -> ChatPrompt:
        """The chat template rendered (tools, thinking switches), how its reply will read, and the
        grammar a forced tool_choice imposes on it (in the template's tool-call syntax). No MLX:
        callable from any thread (token counting runs it off the worker). InvalidRequestError for
        what the template or the grammar cannot hold. `continue_final`: the last message is the
        assistant's unfinished reply (a prefill), which the generation continues. `answer_schema`
        (with tools offered, not forced): the reply is JSON matching it or a call of one of the tools."""
        ...

    @property
    def fills_in_middle(self) -> bool:
        """Whether encode_prompt takes a `suffix` (the tokenizer has fill-in-the-middle tokens)."""
        ...

    def encode_prompt(self, prompt: str | Sequence[int], suffix: str | None = None) -> list[int]:
        """A text completion's prompt as token ids: text is tokenized, ids (a client that tokenized the prompt
        itself) are checked against the vocabulary (InvalidRequestError, param "prompt"); "" is the start of
        a text (engines.text.start_of_text; InvalidRequestError where the tokenizer has no such token). With a
        non-empty `suffix`, the model's fill-in-the-middle prompt of the two (engines.text.fill_in_middle;
        InvalidRequestError, param "suffix", where it has none)."""
        ...

    def prompt_text(self, prompt: str | Sequence[int]) -> str:
        """A text completion's prompt as text, what `echo` returns before the reply: the text itself, or token
        ids decoded (checked as encode_prompt checks them). No MLX: callable from any thread."""
        ...

    def prompt_logprobs(self, prompt_ids: Sequence[int], top: int) -> PromptLogprobs:
        """The prompt's own tokens scored (a text completion's echo with logprobs): each after the first under
        the target given those before it, with `top` alternatives. One more forward over the prompt."""
        ...

    def embed(self, inputs: Sequence[Sequence[int]]) -> Iterator[Pause | dict[int, np.ndarray]]:
        """Texts' embeddings: for each (token ids, non-empty, within the context) the float32 mean of the target's
        final hidden states over them, not normalised, keyed by its index in `inputs`, a forward at a time (short
        texts share one; a long one runs in prefill pieces). A Pause follows each forward (and separates a long
        text's pieces), so a round that computes posts nothing and the next posts that forward's vectors."""
        ...

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        engine: str,
        cancel: CancelToken,
        switch: SwitchRule | None = None,
        reply: ReplyFormat | None = None,
        prefix: PrefixHint | None = None,
    ) -> Iterator[GenerationChunk]:
        """`engine` starts the request; with a `switch` rule it may hand over to another engine;
        with `reply`, reasoning and tool calls are split out of the text; with `prefix`, the prompt's
        longest cached prefix in that scope is reused and new snapshots are stored."""
        ...

    def memory_bytes(self) -> dict[str, int]: ...

    def request_bytes(self, tokens: int) -> int:
        """Bytes the caches of one request hold once its context reaches `tokens` tokens, every loaded engine's
        included (the scheduler's memory budget reserves it). No MLX: callable from any thread."""
        ...

    def batch_stats(self) -> dict[str, float] | None:
        """The raw decoding batch: rows, requests generating, steps and row-steps so far (None: off)."""
        ...

    def prefix_cache_stats(self) -> dict[str, float] | None:
        """Lookups, hits, cached tokens, evictions, bytes and entries of the prefix cache (None: off)."""
        ...

    def cycle_mode_stats(self) -> dict[str, dict[str, float]]:
        """Per speculative engine: seconds per cycle pipelined and host, requests run in each mode, and
        the mode it prefers (1 pipelined, 0 host, NaN still measuring). Empty where nothing was measured."""
        ...

    def end_thread(self) -> None:
        """The last model call of a thread that did model work (the worker, and the main thread that
        loaded the model): MLX needs each such thread to free its streams itself before it ends."""
        ...
