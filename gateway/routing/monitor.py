"""Online monitor: what each engine yields per verify step and what a step costs, on this machine.

Per (class, engine) it keeps EWMAs of accepted draft tokens per verify step (alpha), tokens per step
and seconds per step; per engine and decoding mode (greedy / sampled) it keeps the step seconds that
give the cost ratio c_e against raw's steps of the same mode.
Predictions blend the policy priors with the measurements while an arm warms up and use
speedup_e = (1 + alpha_e) / c_e (docs/design.md "Router and online monitor"). A constant EWMA weight
forgets old data geometrically, so the estimates follow drift.

observe() and predict() run on the scheduler's worker thread, while the HTTP side reads snapshots
(router stats, metrics scrapes) and the autosaver thread saves: one lock guards all state. The state persists atomically (temp file in the same directory, fsync, os.replace).
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass

from contracts.engine import StepResult
from contracts.names import CLASSES, ENGINE_NAMES

from .policy import POOLED_CLASS

log = logging.getLogger(__name__)
T = TypeVar("T")

STATE_FORMAT_VERSION = 1
# Defaults of the policy's monitor.first_use_steps / monitor.stall_factor (gateway/routing/policy.py).
FIRST_USE_STEPS = 16
STALL_FACTOR = 8.0


def _warm_weight(weight: float, n: int) -> float:
    """The newest of n samples' weight: a plain mean for the first 1/weight samples, then `weight`."""
    return max(weight, 1.0 / n)


# The records below are updated on every engine step (on the GPU the host's time per step is the
# step's time): pydantic dataclasses validate the state file like models do, while assigning an
# attribute is a plain slot write (a BaseModel's __setattr__ costs ~1 us, ~40 us a step in all).
@pydantic_dataclass(config=ConfigDict(extra="forbid"), slots=True)
class Ewma:
    """Exponentially weighted mean and variance with a warm start (plain mean for the first 1/w samples)."""

    mean: float = 0.0
    var: float = 0.0
    n: int = Field(0, ge=0)  # observations folded in (not decayed)

    def update(self, value: float, weight: float) -> None:
        self.n += 1
        w = _warm_weight(weight, self.n)
        delta = value - self.mean
        self.mean += w * delta
        self.var = (1.0 - w) * (self.var + w * delta * delta)

    def effective_n(self, weight: float) -> float:
        """How many samples the estimate really rests on (an EWMA remembers about (2 - w) / w)."""
        return min(float(self.n), (2.0 - weight) / weight)


@pydantic_dataclass(config=ConfigDict(extra="forbid"), slots=True)
class ArmStats:
    """Measurements of one (class, engine) arm."""

    accepted: Ewma = Field(default_factory=Ewma)      # accepted draft tokens per verify step
    tokens: Ewma = Field(default_factory=Ewma)        # tokens emitted per timed step
    seconds: Ewma = Field(default_factory=Ewma)       # wall seconds per timed step
    steps: int = 0
    drafted_total: int = 0
    accepted_total: int = 0


@pydantic_dataclass(config=ConfigDict(extra="forbid"), slots=True)
class WindowPairs:
    """Consecutive windows of one engine's accepted tokens within a request, (previous, next) mean:
    EWMAs of the moments behind the regression slope of next on previous."""

    previous: float = 0.0
    following: float = 0.0
    previous_sq: float = 0.0
    product: float = 0.0
    n: int = Field(0, ge=0)

    def update(self, previous: float, following: float, weight: float) -> None:
        self.n += 1
        w = _warm_weight(weight, self.n)
        self.previous += w * (previous - self.previous)
        self.following += w * (following - self.following)
        self.previous_sq += w * (previous * previous - self.previous_sq)
        self.product += w * (previous * following - self.product)

    def slope(self) -> float | None:
        """Share of a window's deviation from the mean that the next window keeps, in [0, 1]; None
        while the windows have not varied."""
        var = self.previous_sq - self.previous * self.previous
        if var <= 1e-9:
            return None
        return min(1.0, max(0.0, (self.product - self.previous * self.following) / var))


class MonitorState(BaseModel):
    """What the state file holds."""

    model_config = ConfigDict(extra="forbid")

    format: int = STATE_FORMAT_VERSION
    saved_at: float = 0.0
    arms: dict[str, ArmStats] = Field(default_factory=dict)             # "class/engine" -> stats
    engine_seconds: dict[str, Ewma] = Field(default_factory=dict)       # "mtp", "mtp/sampled" -> seconds per step
    batch_seconds: dict[str, Ewma] = Field(default_factory=dict)        # rows ("2", "3", ...) -> seconds per batched raw step
    window_pairs: dict[str, WindowPairs] = Field(default_factory=dict)  # "ddtree", "ddtree/sampled" -> consecutive windows
    # "mtp@1024", "raw/sampled@0" -> seconds per step while the context was in the band starting there
    context_seconds: dict[str, Ewma] = Field(default_factory=dict)


@dataclass(frozen=True)
class ArmPrediction:
    """The monitor's current belief about one arm (priors blended in while warming up)."""

    accepted: float            # alpha
    cost: float                # c_e, step cost relative to raw
    speedup: float             # (1 + alpha) / c
    tokens_per_second: float   # raw's step rate x speedup
    accepted_sd: float         # uncertainty of alpha (for Thompson sampling)
    cost_sd: float
    n_accepted: int
    n_cost: int
    accepted_step_sd: float = 0.0   # spread of one verify step's accepted count (the fallback's noise)


def _blend(prior: float, measured: float, n: int, warmup: int) -> float:
    """Prior until there is data, measurement from `warmup` observations on, linear in between."""
    if n <= 0:
        return prior
    if warmup <= 0 or n >= warmup:
        return measured
    weight = n / warmup
    return weight * measured + (1.0 - weight) * prior


def _arm_key(klass: str, engine: str, sampled: bool = False) -> str:
    """Greedy and sampled decoding accept different amounts (a sampled target often leaves the
    draft's argmax path), so they are separate arms: `code/mtp` and `code/mtp/sampled`."""
    return f"{klass}/{engine}/sampled" if sampled else f"{klass}/{engine}"


def _record(table: dict[str, T], key: str, make: Callable[[], T]) -> T:
    """table[key], made on first use (not setdefault(key, make()): that builds a record on every step)."""
    record = table.get(key)
    if record is None:
        record = table[key] = make()
    return record


def _mode_key(engine: str, sampled: bool = False) -> str:
    """Step seconds and window pairs are kept per engine and decoding mode. Sampled steps cost more than greedy ones, by an engine-dependent amount (the sampler runs on
    1 row for raw, 2 for mtp, a whole tree for ddtree: on the CPU +11 %, +22 %, +12 % per step), so
    a ratio is taken within one mode: raw's sampled steps against ddtree's greedy ones read ddtree 10 %
    cheaper than it is, and the router sent sampled requests to it where mtp was faster."""
    return f"{engine}/sampled" if sampled else engine


def _band_key(mode_key: str, band: int) -> str:
    return f"{mode_key}@{band}"


def _seconds_ratio(mine: Ewma | None, raw: Ewma | None) -> tuple[float, float, int] | None:
    """(c, variance of c, observations) of one engine's step seconds against raw's; None unless both are timed."""
    if not mine or not raw or mine.n == 0 or raw.n == 0 or raw.mean <= 0:
        return None
    ratio = mine.mean / raw.mean
    rel_var = mine.var / max(mine.mean**2, 1e-12) + raw.var / max(raw.mean**2, 1e-12)
    return ratio, ratio * ratio * rel_var, min(mine.n, raw.n)


class Monitor:
    """Thread-safe online statistics, persisted to an optional state file."""

    def __init__(self, state_path: str | Path | None = None, ewma_alpha: float = 0.01,
                 first_use_steps: int = FIRST_USE_STEPS, stall_factor: float = STALL_FACTOR,
                 cost_ewma_alpha: float | None = None):
        self._lock = threading.Lock()
        self._weight = ewma_alpha
        self._cost_weight = ewma_alpha if cost_ewma_alpha is None else cost_ewma_alpha
        self._first_use_steps = first_use_steps
        self._stall_factor = stall_factor
        self._state_path = Path(state_path) if state_path is not None else None
        self._state = MonitorState()
        self._dirty = False
        self._first_use: dict[str, int] = {}   # timing key -> steps skipped so far in this process
        self._bands: tuple[int, ...] = ()      # context lengths where a cost band starts (after the first, 0)
        self.load_error: str | None = None
        if self._state_path is not None:
            self._state = self._load(self._state_path)

    # --- configuration --------------------------------------------------------------------
    @property
    def state_path(self) -> Path | None:
        return self._state_path

    def set_ewma_alpha(self, weight: float, cost_weight: float | None = None) -> None:
        """EWMA weights of the newest step: `weight` for acceptance and the per-arm means,
        `cost_weight` (default: `weight`) for the step seconds behind the cost ratios."""
        cost_weight = weight if cost_weight is None else cost_weight
        if not (0.0 < weight <= 1.0 and 0.0 < cost_weight <= 1.0):
            raise ValueError(f"ewma alphas must be in (0, 1], got {weight}, {cost_weight}")
        with self._lock:
            self._weight, self._cost_weight = weight, cost_weight

    def set_timing(self, first_use_steps: int, stall_factor: float) -> None:
        """Step timing guards: `first_use_steps` timed steps skipped per (engine, mode) in this process
        (its first cycles of each kind compile and allocate: on the H200 a few such stalls read sampled
        MTP at 9.3 raw steps where its steps cost 2.0, for hundreds of steps; not persisted, since a
        restarted process compiles again); later, a step over `stall_factor` times the running mean
        counts as that much (a GC pause or another process, not the engine's cost; wide, because
        speculative cycles' times are spread and their mean is what they cost)."""
        if first_use_steps < 0 or stall_factor < 1.0:
            raise ValueError(f"first_use_steps must be >= 0 and stall_factor >= 1, got {first_use_steps}, {stall_factor}")
        with self._lock:
            self._first_use_steps, self._stall_factor = first_use_steps, stall_factor

    # --- updates (worker thread) ----------------------------------------------------------
    def set_context_bands(self, edges: tuple[int, ...] | list[int]) -> None:
        """Context lengths (tokens) where a new cost band starts: a step's seconds are also kept per band,
        and a prediction for a request in a band uses that band's cost ratio once it is measured."""
        with self._lock:
            self._bands = tuple(sorted(int(e) for e in edges if e > 0))

    def band(self, context: int | None) -> int | None:
        """The band a context of `context` tokens falls in (its lower edge), None without bands."""
        if context is None or not self._bands:
            return None
        return max((edge for edge in self._bands if edge <= context), default=0)

    def observe(self, klass: str, step: StepResult, timed: bool = True, sampled: bool = False,
                context: int | None = None) -> None:
        """Fold one engine step into the stats of (klass, step.engine), and its probes of other
        engines into theirs (acceptance only: a probe has no cost of its own). `context`: tokens in
        the request's context when the step began (prompt + generated), for the per-band costs.

        `timed=False` for a request's first step, whose wall time includes the prefill; a probing
        step's time also pays for keeping other engines in sync, so it is never timed either.
        """
        if step.engine not in ENGINE_NAMES or (klass not in CLASSES and klass != POOLED_CLASS):
            return
        timed = timed and not step.probing and not step.interleaved
        if step.batch_rows > 1:   # a shared raw step: its time is the batch's, learned per batch size
            if timed and step.seconds > 0 and math.isfinite(step.seconds):
                with self._lock:
                    self._time_locked(self._state.batch_seconds, str(step.batch_rows), step.seconds)
                    self._dirty = True
            return
        # every step also feeds the pooled (engine-level) arm; an uncertain request feeds it alone
        keys = (klass,) if klass == POOLED_CLASS else (klass, POOLED_CLASS)
        with self._lock:
            for key in keys:
                self._fold_locked(key, step, timed, sampled)
            if timed and step.seconds > 0 and math.isfinite(step.seconds) and step.tokens:
                mode = _mode_key(step.engine, sampled)
                seconds = self._time_locked(self._state.engine_seconds, mode, step.seconds)
                band = self.band(context)
                if seconds is not None and band is not None:
                    _record(self._state.context_seconds, _band_key(mode, band), Ewma).update(seconds, self._cost_weight)
            self._dirty = True

    def observe_windows(self, engine: str, previous: float, following: float, sampled: bool = False) -> None:
        """Two consecutive windows' mean accepted tokens of `engine` in one request (router.observe
        cuts them): how much of a window's dip or peak lasts into the next one."""
        if engine not in ENGINE_NAMES or engine == "raw":
            return
        with self._lock:
            _record(self._state.window_pairs, _mode_key(engine, sampled), WindowPairs).update(
                previous, following, self._weight)
            self._dirty = True

    def persistence(self, engine: str, sampled: bool, warmup: int, prior: float = 1.0) -> float:
        """The measured share of a window's deviation that the next window keeps, once `warmup` pairs
        of windows of this engine and decoding mode are in (the modes differ most here: not borrowed);
        until then `prior` (1.0: the window at face value)."""
        with self._lock:
            pairs = self._state.window_pairs.get(_mode_key(engine, sampled))
            slope = pairs.slope() if pairs is not None and pairs.n >= max(warmup, 1) else None
            return prior if slope is None else slope

    def _time_locked(self, table: dict[str, Ewma], key: str, seconds: float) -> float | None:
        """Fold one step's seconds into table[key], past this process's first uses and clipped at a stall;
        returns the seconds folded (None: skipped). (The tables' keys never meet: engines and modes,
        "mtp/sampled", against batch sizes, "2".)"""
        skipped = self._first_use.get(key, 0)
        if skipped < self._first_use_steps:
            self._first_use[key] = skipped + 1
            return None
        stat = _record(table, key, Ewma)
        if stat.n:
            seconds = min(seconds, self._stall_factor * stat.mean)
        stat.update(seconds, self._cost_weight)
        return seconds

    def _fold_locked(self, klass: str, step: StepResult, timed: bool, sampled: bool) -> None:
        for engine, probed in step.probes.items():
            if engine in ENGINE_NAMES and engine != step.engine:
                probed_arm = _record(self._state.arms, _arm_key(klass, engine, sampled), ArmStats)
                for accepted in probed:
                    probed_arm.accepted.update(float(accepted), self._weight)
        arm = _record(self._state.arms, _arm_key(klass, step.engine, sampled), ArmStats)
        arm.steps += 1
        if step.drafted > 0:
            arm.accepted.update(float(step.accepted), self._weight)
            arm.drafted_total += step.drafted
            arm.accepted_total += step.accepted
        if timed and step.seconds > 0 and math.isfinite(step.seconds) and step.tokens:
            arm.tokens.update(float(len(step.tokens)), self._weight)
            arm.seconds.update(step.seconds, self._weight)

    # --- predictions (worker thread) ------------------------------------------------------
    def predict(
        self,
        klass: str,
        engine: str,
        prior_accepted: float,
        prior_cost: float,
        warmup: int,
        prior_raw_tokens_per_second: float,
        prior_accepted_sd: float = 0.5,
        sampled: bool = False,
        cost_warmup: int | None = None,
        context: int | None = None,
    ) -> ArmPrediction:
        """`warmup`: observations before an arm's alpha replaces its prior; `cost_warmup` (default:
        `warmup`): timed steps before the engine's measured step cost replaces `prior_cost`, and before
        its cost in the band of `context` (tokens) replaces the cost over all contexts."""
        with self._lock:
            return self._predict_locked(
                klass, engine, prior_accepted, prior_cost, warmup, prior_raw_tokens_per_second, prior_accepted_sd,
                sampled, cost_warmup=warmup if cost_warmup is None else cost_warmup, band=self.band(context),
            )

    def _predict_locked(
        self,
        klass: str,
        engine: str,
        prior_accepted: float,
        prior_cost: float,
        warmup: int,
        prior_raw_tps: float,
        prior_accepted_sd: float,
        sampled: bool = False,
        *,
        cost_warmup: int,
        band: int | None = None,
    ) -> ArmPrediction:
        raw_seconds = self._raw_seconds_locked(sampled)
        raw_rate = _blend(
            prior_raw_tps,
            1.0 / raw_seconds.mean if raw_seconds and raw_seconds.mean > 0 else prior_raw_tps,
            raw_seconds.n if raw_seconds else 0,
            cost_warmup,
        )
        if engine == "raw":
            return ArmPrediction(0.0, 1.0, 1.0, raw_rate, 0.0, 0.0, 0, raw_seconds.n if raw_seconds else 0)
        arm = self._state.arms.get(_arm_key(klass, engine, sampled))
        n_acc = arm.accepted.n if arm else 0
        accepted = _blend(prior_accepted, arm.accepted.mean if arm else 0.0, n_acc, warmup)
        measured_cost, cost_var, n_cost = self._cost_locked(engine, sampled)
        cost = max(_blend(prior_cost, measured_cost, n_cost, cost_warmup), 1e-6)
        if band is not None:   # the ratio over all contexts is this band's prior until the band is measured
            band_cost, band_var, n_band = self._band_cost_locked(engine, sampled, band)
            if n_band:
                cost = max(_blend(cost, band_cost, n_band, cost_warmup), 1e-6)
                if n_band >= cost_warmup:   # and its spread is the band's own
                    cost_var, n_cost = band_var, n_band
        speedup = (1.0 + accepted) / cost
        # uncertainty shrinks from the prior's as data arrives (a variance from 1-2 samples means nothing)
        accepted_sd = _blend(prior_accepted_sd, self._sd(arm.accepted if arm else None, prior_accepted_sd), n_acc, warmup)
        # before any timing, a step's relative cost is taken as known to ~10% (it is mostly arithmetic)
        cost_n_eff = min(float(n_cost), (2.0 - self._cost_weight) / self._cost_weight)
        measured_cost_sd = math.sqrt(cost_var / max(1.0, cost_n_eff)) if n_cost else 0.1 * prior_cost
        cost_sd = _blend(0.1 * prior_cost, measured_cost_sd, n_cost, cost_warmup)
        # per-step spread: measured once there are two observations, else the prior's sd stands in
        step_sd = math.sqrt(arm.accepted.var) if arm and arm.accepted.n >= 2 else prior_accepted_sd
        return ArmPrediction(accepted, cost, speedup, raw_rate * speedup, accepted_sd, cost_sd, n_acc, n_cost, step_sd)

    def _sd(self, stat: Ewma | None, prior_sd: float) -> float:
        """Standard error of an EWMA mean; the prior's sd while there is no data."""
        if stat is None or stat.n == 0:
            return prior_sd
        n_eff = stat.effective_n(self._weight)
        return math.sqrt(max(stat.var, 1e-4) / n_eff)

    def _raw_seconds_locked(self, sampled: bool = False) -> Ewma | None:
        """Raw's step seconds in this mode, or in the other one while this mode has none."""
        for mode in (sampled, not sampled):
            stat = self._state.engine_seconds.get(_mode_key("raw", mode))
            if stat and stat.n and stat.mean > 0:
                return stat
        return None

    def _cost_locked(self, engine: str, sampled: bool = False) -> tuple[float, float, int]:
        """(c_e, variance of c_e, observations) from mean step seconds against raw's in the same
        mode; the other mode's ratio while this mode lacks either side; (1, 0, 0) with no timing."""
        for mode in (sampled, not sampled):
            found = _seconds_ratio(self._state.engine_seconds.get(_mode_key(engine, mode)),
                                   self._state.engine_seconds.get(_mode_key("raw", mode)))
            if found is not None:
                return found
        return 1.0, 0.0, 0

    def _band_cost_locked(self, engine: str, sampled: bool, band: int) -> tuple[float, float, int]:
        """c_e within one context band, against raw's steps in the same band and mode; (1, 0, 0) until
        both are timed there (a band borrows nothing: the point is that its ratio differs)."""
        found = _seconds_ratio(self._state.context_seconds.get(_band_key(_mode_key(engine, sampled), band)),
                               self._state.context_seconds.get(_band_key(_mode_key("raw", sampled), band)))
        return found if found is not None else (1.0, 0.0, 0)

    def timed_steps(self, engine: str, sampled: bool) -> int:
        """Timed steps of `engine` in this mode, over all contexts."""
        with self._lock:
            stat = self._state.engine_seconds.get(_mode_key(engine, sampled))
            return stat.n if stat else 0

    def timed_in_band(self, engine: str, sampled: bool, context: int | None) -> int | None:
        """Timed steps of `engine` in the band of `context` (None without bands)."""
        band = self.band(context)
        if band is None:
            return None
        with self._lock:
            stat = self._state.context_seconds.get(_band_key(_mode_key(engine, sampled), band))
            return stat.n if stat else 0

    def batch_costs(self, prior_row_cost: float, rows: int, warmup: int) -> tuple[float, ...]:
        """c(B) for B = 1..rows: a raw step shared by B requests, in single raw steps. The prior
        1 + prior_row_cost (B - 1) until a size has `warmup` timed steps; never decreasing in B (a
        bigger batch never costs less; noise must not make extra rows look free)."""
        with self._lock:
            raw = self._raw_seconds_locked()   # a batch mixes both modes' rows; its ratio is to a greedy step
            costs = [1.0]
            for size in range(2, rows + 1):
                prior = 1.0 + prior_row_cost * (size - 1)
                stat = self._state.batch_seconds.get(str(size))
                measured = stat.mean / raw.mean if stat and stat.n and raw and raw.n and raw.mean > 0 else prior
                costs.append(max(costs[-1], _blend(prior, measured, stat.n if stat else 0, warmup)))
            return tuple(costs)

    def measured_cost(self, engine: str, sampled: bool = False) -> tuple[float, int]:
        """(c_e, observations) as measured, without priors; (1.0, 0) when unknown."""
        with self._lock:
            ratio, _, n = self._cost_locked(engine, sampled)
            return ratio, n

    # --- export -----------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """Raw measurements, JSON-able (predictions with priors come from the router)."""
        with self._lock:
            arms = {}
            for key, arm in self._state.arms.items():
                arms[key] = {
                    "steps": arm.steps,
                    "accepted_per_step": arm.accepted.mean if arm.accepted.n else None,
                    "accepted_observations": arm.accepted.n,
                    "tokens_per_second": arm.tokens.mean / arm.seconds.mean if arm.seconds.n and arm.seconds.mean > 0 else None,
                    "seconds_per_step": arm.seconds.mean if arm.seconds.n else None,
                    "drafted_total": arm.drafted_total,
                    "accepted_total": arm.accepted_total,
                }
            engines = {}
            for key, seconds in self._state.engine_seconds.items():
                engine, _, mode = key.partition("/")
                ratio, _, n = self._cost_locked(engine, mode == "sampled")
                engines[key] = {
                    "seconds_per_step": seconds.mean,
                    "timed_steps": seconds.n,
                    "cost_ratio": ratio if n else None,
                }
            raw = self._raw_seconds_locked()
            batches = {
                rows: {"seconds_per_step": stat.mean, "timed_steps": stat.n,
                       "cost_ratio": stat.mean / raw.mean if raw and raw.n and raw.mean > 0 else None}
                for rows, stat in sorted(self._state.batch_seconds.items(), key=lambda kv: int(kv[0]))
            }
            persistence = {key: {"pairs": pairs.n, "persistence": pairs.slope()}
                           for key, pairs in sorted(self._state.window_pairs.items())}
            bands = {}
            for key, seconds in sorted(self._state.context_seconds.items()):
                mode_key, _, band = key.rpartition("@")
                engine, _, mode = mode_key.partition("/")
                ratio, _, n = self._band_cost_locked(engine, mode == "sampled", int(band))
                bands[key] = {"seconds_per_step": seconds.mean, "timed_steps": seconds.n,
                              "cost_ratio": ratio if n else None}
            return {"arms": arms, "engines": engines, "batches": batches, "persistence": persistence,
                    "context_bands": bands,
                    "ewma_alpha": self._weight,
                    "cost_ewma_alpha": self._cost_weight}

    # --- persistence ------------------------------------------------------------------------
    def _load(self, path: Path) -> MonitorState:
        """Read the state file; anything wrong is logged and an empty state is used instead."""
        if not path.exists():
            return MonitorState()
        try:
            state = MonitorState.model_validate_json(path.read_bytes())
            if state.format != STATE_FORMAT_VERSION:
                raise ValueError(f"state format {state.format}, expected {STATE_FORMAT_VERSION}")
        except (OSError, ValueError, ValidationError) as exc:
            self.load_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            log.warning("router state file %s ignored (%s); starting with priors only", path, self.load_error)
            return MonitorState()
        log.info("router state loaded from %s (%d arms)", path, len(state.arms))
        return state

    def save(self, force: bool = False) -> bool:
        """Write the state atomically if anything changed (or `force`). Returns True if written."""
        if self._state_path is None:
            return False
        with self._lock:
            if not (self._dirty or force):
                return False
            self._state.saved_at = time.time()
            payload = self._state.model_dump_json(indent=1)
            self._dirty = False
        try:
            write_atomically(self._state_path, payload)
        except OSError as exc:
            with self._lock:
                self._dirty = True
            log.warning("cannot save router state to %s: %s", self._state_path, exc)
            return False
        return True


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never a partial one (same-dir temp + fsync + replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


class Autosaver:
    """Background thread that saves the monitor every `interval` seconds, and once more on stop()."""

    def __init__(self, monitor: Monitor, interval: float):
        self._monitor = monitor
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="switchyard-state-saver", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def set_interval(self, interval: float) -> None:
        self._interval = interval

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._monitor.save()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._monitor.save()
