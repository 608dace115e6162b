"""The one speculative decode loop (MTP and DDTree supply only their cycle) and the chain verify rule.

Pipelined cycles (docs/design.md "Pipelined speculation"): a cycle's verdict stays on the device.
`launch` queues draft + verify + commit with the accepted count, the GDN state per accepted slot and
the attention caches' committed length all as device arrays (engines/target.py `Cursor`), so the
loop queues cycle n+1 before it reads cycle n's tokens (`land`, the cycle's one host sync): the
device always has the next cycle to run, as raw decode has its next step. Tokens are streamed and
stop-checked one cycle late; a queued cycle the request no longer wants (a hand-off to raw, the
end of the request) is undone by `rollback`, which puts back the state it replaced (references
to immutable arrays: nothing is copied). Requests whose target logits need a host read per cycle
(penalties, a constraint) and the probing phase of a switch rule run the host `cycle` instead, and
so does the CPU backend by default (`kernels.pipelined_cycles`: no device to keep busy there). On a GPU
each engine measures both cycles on live requests and keeps the cheaper (engines/cycle_modes.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import mlx.core as mx

from contracts.chat import TokenLogprob
from contracts.engine import CancelToken, StepResult, SwitchRule
from contracts.names import SAMPLED_SUFFIX
from contracts.sampling import SamplingParams

from .bundle import ModelBundle
from .prefill import PrefixPlan, PrefixUse, prefill_stepwise
from .processing import TargetProcessor
from .raw import decode
from .resume import request_processor, request_rng
from .rows import Reads, widest
from .sampling import Candidates, Rng, SamplerConfig, candidates, choose, resolve
from .switching import SwitchWatch
from .target import ForwardOutput, forward_causal


@dataclass
class ChainVerdict:
    """Lazy result of verifying one drafted token (all arrays; read them with one host sync)."""

    accepted: mx.array   # bool scalar
    bonus: mx.array      # token emitted after the accepted prefix


def verify_one(
    draft: mx.array,
    draft_dist: Candidates | None,
    target_logits: mx.array,
    cfg: SamplerConfig,
    rng: Rng,
) -> ChainVerdict:
    """Verify one draft token d against target logits for [pos of d, pos after d].

    Shapes: draft (...), draft_dist over (..., K), target_logits (..., 2, V); leading axes batch
    independent verifies. Greedy: accept iff d is the target's argmax; the bonus is the target's
    argmax where the chain stops. Sampled: accept with min(1, p(d)/q(d)), else draw from
    normalize(max(p - q, 0)); p and q come from the same sampler settings, so the output has the
    target's distribution. Everything after the target's truncation runs on its candidates: the
    residual max(p - q, 0) is zero wherever p is.
    """
    if cfg.greedy:
        choice = mx.argmax(target_logits, axis=-1)
        accepted = choice[..., 0] == draft
        return ChainVerdict(accepted, mx.where(accepted, choice[..., 1], choice[..., 0]))
    vocab = target_logits.shape[-1]
    p = candidates(target_logits, cfg)
    now, following = (Candidates(None if p.tokens is None else p.tokens[..., i, :], p.logprobs[..., i, :])
                      for i in (0, 1))
    accepted = rng.uniform(draft.shape) * draft_dist.prob_of(draft, vocab) < now.prob_of(draft, vocab)
    # q at p's columns: without top-k both are the whole vocabulary in id order, column for column
    q_at_p = mx.exp(draft_dist.logprobs) if now.tokens is None else draft_dist.probs_at(now.tokens, vocab)
    residual = mx.maximum(mx.exp(now.logprobs) - q_at_p, 0.0)
    total = residual.sum(axis=-1, keepdims=True)
    residual_lp = mx.where(total > 0, mx.log(residual) - mx.log(mx.maximum(total, 1e-30)), now.logprobs)
    rejected_bonus = rng.sample(Candidates(now.tokens, residual_lp))
    accepted_bonus = rng.sample(following)
    return ChainVerdict(accepted, mx.where(accepted, accepted_bonus, rejected_bonus))


@dataclass
class Committed:
    """The rows one step fed into the target caches, for the engines kept in sync beside it.

    fed[i] entered the caches at this step and emitted[i] is the token that follows it: for a verify
    cycle fed = [pending, accepted drafts...] and emitted = [accepted drafts..., bonus]; for a raw
    step fed = [pending], emitted = [next]. The last emitted token is the next pending one.
    """

    fed: list[int]
    emitted: list[int]
    hidden: mx.array                        # (len(fed), H) final-norm hidden states of the fed rows
    layer_outputs: dict[int, mx.array]      # captured layer -> (len(fed), H)


@dataclass
class Cycle:
    """What one step of an engine (a draft + verify + commit cycle, or a raw decode step) produced."""

    emitted: list[int]                 # accepted draft tokens, then the bonus token
    drafted: int
    accepted: int
    accepted_positions: list[bool] = field(default_factory=list)
    committed: Committed | None = None  # filled when other engines are being kept in sync
    logprobs: list[TokenLogprob] = field(default_factory=list)  # per emitted token, when asked


@dataclass
class Flight:
    """One queued (pipelined) cycle: `result` holds [emitted count, deepest tree depth, emitted
    tokens...] on the device (read once, by `land`); `pending` is its last emitted token, still on
    the device, which the next cycle starts from."""

    result: mx.array
    pending: mx.array
    logits: mx.array        # (T, V) target logits of the verify, for log-probabilities
    path: mx.array          # (T,) accepted slots in depth order, then filler
    drafted: int
    undo: Callable[[], None]   # puts back the state this cycle replaced


class Drafting(Protocol):
    """A request's state for one engine after prefill. `cycle` feeds the pending token (not yet in
    the target caches) and returns what it emitted — its last token is the next pending one.
    `absorb` keeps the state in sync with rows another engine committed and returns this engine's
    probed acceptance on them (accepted draft tokens per would-be verify). `launch` / `land` split
    a cycle around its host read (pipelined; a Flight's `undo` takes back a launched, unread cycle)
    and `settle` hands the caches back to host-offset code (after the last land or undo). Raw's
    stepping only ever runs host cycles."""

    def cycle(self, pending: int, sync: bool) -> Cycle: ...

    def absorb(self, committed: Committed) -> list[float]: ...

    def launch(self, pending: mx.array) -> Flight: ...

    def land(self, flight: Flight) -> Cycle: ...

    def settle(self) -> None: ...


def read_flight(flight: Flight) -> tuple[list[int], int]:
    """The cycle's one host read: (emitted tokens, deepest tree depth)."""
    values = flight.result.tolist()
    count, depth = values[0], values[1]
    return values[2: 2 + count], depth


def rollback(state: Drafting, flight: Flight) -> None:
    """Undo a launched, unread cycle and hand the caches back to host-offset code."""
    flight.undo()
    state.settle()


@dataclass
class Prefilled:
    """What every engine's state starts from: the request after its prefill."""

    cache: list                  # the target caches (shared by every engine of the request)
    prompt: mx.array             # (P,) uint32 prompt ids
    out: ForwardOutput           # the prompt rows' hidden states and captured layers, where the engines read them
    first: mx.array              # (1,) the first generated token (lazy), the first pending one
    cfg: SamplerConfig
    rng: Rng
    capture: tuple[int, ...]     # layers every verify must capture while engines are kept in sync
    processor: TargetProcessor   # penalties / constraint on every verified row; log-probabilities
    probe_every: int = 1         # steps between probes of engines whose probe is dear
    prefix: PrefixUse | None = None   # the prefix cache's entries: engines resume and deposit their state


class SpeculativeEngine(Protocol):
    name: str
    capture: tuple[int, ...]   # target layers whose outputs its state needs
    reads: Reads               # which prompt rows of those (and of the hidden states) it reads

    @property
    def cycle_key(self) -> str:
        """What its cycle cost is measured under (engines/cycle_modes.py): the name, plus whatever
        changes the cycle's shape (DDTree's budget)."""
        ...

    def start(self, request: Prefilled) -> Drafting: ...


class SpeculativeDecoding:
    """What MTP and DDTree share as engines: `generate` is the one speculative loop over their cycles,
    with the other engines the request may hand over to (`peers`)."""

    name: str
    bundle: ModelBundle

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        cancel: CancelToken,
        switch: SwitchRule | None = None,
        peers: Mapping[str, SpeculativeEngine] | None = None,
        prefix: PrefixPlan | None = None,
        written: Sequence[int] = (),
    ) -> Iterator[StepResult]:
        engines = {**(peers or {}), self.name: self}
        return speculative_generate(self.bundle, engines, self.name, prompt_ids, params, cancel, switch, prefix=prefix,
                                    written=written)


class RawStepping:
    """Raw decoding as a Drafting, for the steps in which other engines are kept in sync (it must
    hand over the fed row's hidden state and captured layers). Otherwise raw runs `decode`."""

    def __init__(self, bundle: ModelBundle, cache: list, cfg: SamplerConfig, rng: Rng, capture: tuple[int, ...],
                 processor: TargetProcessor):
        self.bundle, self.cache, self.cfg, self.rng, self.capture = bundle, cache, cfg, rng, capture
        self.processor = processor

    def cycle(self, pending: int, sync: bool) -> Cycle:
        out = forward_causal(self.bundle, mx.array([pending], dtype=mx.uint32), self.cache, self.capture)
        logits = self.processor.apply(self.bundle.lm_head(out.hidden[-1:]), [[]])
        token = int(choose(logits, self.cfg, self.rng).item())
        committed = Committed([pending], [token], out.hidden, out.layer_outputs) if sync else None
        return Cycle([token], drafted=0, accepted=0, committed=committed,
                     logprobs=self.processor.logprobs(logits, [token]))

    def absorb(self, committed: Committed) -> list[float]:
        return []


def speculative_generate(
    bundle: ModelBundle,
    engines: Mapping[str, SpeculativeEngine],
    running: str,
    prompt_ids: Sequence[int],
    params: SamplingParams,
    cancel: CancelToken,
    switch: SwitchRule | None,
    prefix: PrefixPlan | None = None,
    written: Sequence[int] = (),
) -> Iterator[StepResult]:
    """The one speculative decode loop: prefill, first token, then steps until cancelled (`written`: the reply's
    tokens so far, of a request resumed after releasing its caches, prefilled after the prompt).

    `running` starts the request (raw or a key of `engines`). With a switch rule, every engine in its
    targets is kept in sync for the first `probe_steps` steps (its state absorbs the rows the running
    engine commits, which probes its acceptance); after each step the request may move to the engine
    the rule favours. Past the probing phase only the hand-off to raw stays possible, and raw then
    decodes the rest pipelined on the same caches.
    """
    cfg = resolve(params, bundle.generation)
    rng = request_rng(params, written)
    cache = bundle.make_cache()
    started = time.perf_counter()

    probe_steps = switch.probe_steps if switch is not None else 0
    live = [running] + [e for e in (switch.targets if probe_steps else ()) if e in engines and e != running]
    capture = tuple(sorted({i for e in live if e in engines for i in engines[e].capture}))
    reads = widest(engines[e].reads for e in live if e in engines)   # the last row's always comes too
    probe_every = switch.probe_every if switch is not None else 1

    processor = request_processor(params, prompt_ids, written, bundle.tokenizer, bundle.vocab_size)
    ids = [*prompt_ids, *written]
    prefilled, cached, prefix_use = yield from prefill_stepwise(bundle, cache, ids, capture, last_alone=True,
                                                                plan=prefix, reads=reads)
    first_logits = processor.apply(bundle.lm_head(prefilled.hidden[-1:]), [[]])
    first = choose(first_logits, cfg, rng)
    request = Prefilled(cache, mx.array([int(t) for t in ids], dtype=mx.uint32), prefilled, first, cfg, rng,
                        capture, processor, probe_every, prefix_use)
    states: dict[str, Drafting] = {e: engines[e].start(request) for e in live if e in engines}
    # the engines hold what they read of the prompt's rows now: the prefill's output must not stay for the whole
    # reply (without an MTP window, every prompt row's hidden state: ~1 GiB at 100k tokens on a 27B-class model)
    del request, prefilled
    pending = int(first.item())
    logprobs = processor.logprobs(first_logits, [pending])
    processor.advance([pending])
    now = time.perf_counter()
    yield StepResult(tokens=[pending], seconds=now - started, engine=running, logprobs=logprobs, cached_tokens=cached)
    started = now

    watch = SwitchWatch(switch, running)
    raw_stepping = RawStepping(bundle, cache, cfg, rng, capture, processor)
    steps = 0
    flight: Flight | None = None   # the cycle queued behind the one being read (pipelined)
    pipelined: bool | None = None  # this engine's cycle mode (engines/cycle_modes.py), chosen at its first cycle
    mode_key = running
    mode_cycles = 0                # timed cycles in that mode so far
    try:
        while not cancel.cancelled:
            probing = steps < probe_steps and len(states) > (0 if running == "raw" else 1)
            if not probing and len(states) > 1:  # the probing phase is over: only raw stays reachable
                states = {running: states[running]} if running in states else {}
            if running == "raw" and not probing:
                yield from decode(bundle, cache, pending, cfg, rng, cancel, engine="raw", processor=processor,
                                  batch=bundle.decode_batch)
                return
            state = states[running] if running != "raw" else raw_stepping
            if pipelined is None and running != "raw":   # once per engine the request runs
                # sampled cycles verify with more ops (probabilities, draws): their own costs
                mode_key = engines[running].cycle_key + ("" if cfg.greedy else SAMPLED_SUFFIX)
                pipelined = bundle.cycle_modes.choose(mode_key)
            timed = running != "raw" and not probing and not processor.active
            began = time.perf_counter()
            if timed and pipelined:
                # queue cycle n+1 (from cycle n's bonus, still on the device) before reading cycle n
                if flight is None:
                    flight = state.launch(mx.array(pending, dtype=mx.uint32))
                following = state.launch(flight.pending)
                cycle, flight = state.land(flight), following
            else:
                cycle = state.cycle(pending, sync=probing)
            if timed:
                bundle.cycle_modes.record(mode_key, bool(pipelined), mode_cycles, time.perf_counter() - began)
                mode_cycles += 1
            steps += 1
            pending = cycle.emitted[-1]
            report = _report(cycle, states, running, probing, processor, watch, started)
            # the consumer's work on this step's tokens (detokenising, streaming, the monitor) counts
            # toward the next step, as in raw decode: a cost ratio compares what each engine's tokens cost
            started = time.perf_counter()
            yield report
            if switch is not None and bundle.decode_batch is not None:   # under load raw is priced as a batch row
                batch = bundle.decode_batch
                watch.rule = switch.batched(batch.shares_with(batch.length(cache)))
            target = watch.choice(None if probing else ("raw",))
            if target is not None:
                if flight is not None:   # the queued cycle ran past the hand-off: undo it
                    rollback(state, flight)
                    flight = None
                watch.switched(target)
                running, pipelined, mode_cycles = target, None, 0
    finally:
        if flight is not None:   # the request ended (stop, EOS, max_tokens, cancel): the caches keep what was read
            rollback(states[running], flight)


def _report(cycle: Cycle, states: Mapping[str, Drafting], running: str, probing: bool, processor: TargetProcessor,
            watch: SwitchWatch, started: float) -> StepResult:
    """Report one read cycle: the processor and the probes see its tokens, the watch its acceptance."""
    processor.advance(cycle.emitted)
    probes: dict[str, list[float]] = {}
    if probing:
        for engine, other in states.items():
            if engine != running:
                probes[engine] = other.absorb(cycle.committed)
                for accepted in probes[engine]:
                    watch.record_probe(engine, accepted)
    if running != "raw":
        watch.record(cycle.accepted)
    return StepResult(
        tokens=cycle.emitted, drafted=cycle.drafted, accepted=cycle.accepted, seconds=time.perf_counter() - started,
        engine=running, accepted_positions=cycle.accepted_positions, probes=probes, probing=probing,
        logprobs=cycle.logprobs,
    )
