"""The adaptive router: class + online monitor + policy -> engine, with a reason for every decision.

Order of decisions (the first that applies wins):
  forced (request field/header) > rule (policy rules by class, prompt length, response_format)
  > health (the preferred engine is quarantined or not loaded) > fallback (queue deeper than the
  threshold => raw) > explore (epsilon-greedy or Thompson) > monitor (argmax predicted tokens/s,
  with a switch margin so near-ties do not flap).
Auto-routed picks carry a SwitchRule: the monitor's cost ratios and per-step spreads, the policy's
evidence window, margin and evidence_z (fallback section), and the engines the request may move
to: raw always (the hand-off when acceptance falls below break-even, alpha* = c - 1), and every
other healthy speculative engine while it is probed (switching section).
"""

from __future__ import annotations

import logging
import math
import random
import signal
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Mapping, Protocol, Sequence

from contracts.engine import StepResult, SwitchRule, marginal_batch_cost
from contracts.errors import EngineFailure, EngineUnavailableError, InvalidRequestError
from contracts.names import CLASSES, ENGINE_NAMES, STRUCTURED_RESPONSE_FORMATS
from contracts.request_text import RequestText

from .interface import AdmissionLimit, LoadReading, RouteDecision, RouteRequest
from .monitor import ArmPrediction, Autosaver, Monitor
from .policy import POOLED_CLASS, BatchingPolicy, Policy
from .policy_watch import PolicySnapshot, PolicyStore, ReloadResult

log = logging.getLogger(__name__)

_MAX_OPEN_REQUESTS = 4096   # bound on per-request step counters if finished() is ever skipped
_KEPT_SNAPSHOTS = 16        # policy versions remembered for requests still running


@dataclass(slots=True)
class _WindowTrack:
    """One request's verifies on its running engine, cut into consecutive windows."""

    engine: str
    size: int
    total: float = 0.0
    count: int = 0
    previous: float | None = None

    def add(self, accepted: float) -> tuple[float, float] | None:
        self.total += accepted
        self.count += 1
        if self.count < self.size:
            return None
        mean, previous = self.total / self.count, self.previous
        self.total, self.count, self.previous = 0.0, 0, mean
        return None if previous is None else (previous, mean)


class PredictionLike(Protocol):
    label: str
    probs: Mapping[str, float]


class ClassifierLike(Protocol):
    """What the router needs from classifier.Classifier."""

    def predict(self, request: RequestText) -> PredictionLike: ...


def load_classifier(path: str | Path | None = None) -> ClassifierLike | None:
    """The shipped classifier (classifier.Classifier.load), or None if it is missing or broken:
    the router then gives every request the policy's default_class, and says so in the log."""
    try:
        from classifier import Classifier  # type: ignore[attr-defined]
    except ImportError as exc:
        log.warning("request classifier not available (%s); routing uses the policy's default_class", exc)
        return None
    try:
        return Classifier.load(path)
    except Exception as exc:  # a bad artifact must not stop the server: routing still works per class prior
        log.warning("request classifier failed to load (%s); routing uses the policy's default_class", exc)
        return None


class AdaptiveRouter:
    """Implements gateway.routing.interface.Router. Every method runs on the worker thread; the
    HTTP side only reads stats() and calls reload(), so shared state sits behind one lock."""

    def __init__(
        self,
        store: PolicyStore,
        monitor: Monitor,
        loaded_engines: Sequence[str],
        classifier: ClassifierLike | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if "raw" not in loaded_engines:
            raise ValueError("the raw engine must be loaded: it is every fallback's target")
        self.store = store
        self.monitor = monitor
        self.classifier = classifier
        self._loaded = frozenset(loaded_engines)
        self._rng = rng or random.Random()
        self._clock = clock
        self._lock = threading.Lock()
        self._quarantine_until: dict[str, float] = {}
        self._incumbent: dict[tuple[str, bool], str] = {}  # (class, sampled) -> engine last chosen by the monitor
        self._open_steps: OrderedDict[int, tuple[int, int]] = OrderedDict()  # id(decision) -> (steps, tokens) seen
        self._windows: dict[int, _WindowTrack] = {}   # id(decision) -> its running engine's current window
        self._snapshots: OrderedDict[int, PolicySnapshot] = OrderedDict()
        self._decisions: Counter[tuple[str, str, str]] = Counter()  # (class, engine, reason)
        self._classifier_errors = 0
        self._admission: tuple[LoadReading, AdmissionLimit] | None = None   # the worker's last reading and answer
        self._autosaver: Autosaver | None = None
        self._previous_sighup = None
        self._remember(store.current())
        monitor.set_ewma_alpha(store.policy.monitor.ewma_alpha, store.policy.monitor.cost_ewma_alpha)
        monitor.set_timing(store.policy.monitor.first_use_steps, store.policy.monitor.stall_factor)
        monitor.set_context_bands(store.policy.monitor.context_bands)
        store.subscribe(self._on_reload)
        self._warn_unloaded(store.policy)

    @classmethod
    def from_policy_file(
        cls,
        path: str | Path | None,
        loaded_engines: Sequence[str],
        classifier: ClassifierLike | None | Literal["auto"] = "auto",
        state_path: str | Path | None = None,
    ) -> "AdaptiveRouter":
        """Policy from `path` (None = built-in defaults; invalid => PolicyError), monitor state from
        `state_path` or the policy's `state.path` (unreadable => logged, start from priors), and the
        shipped classifier unless one (or None) is given."""
        store = PolicyStore(path)
        policy = store.policy
        monitor = Monitor(state_path or policy.state.resolved_path(), policy.monitor.ewma_alpha,
                          cost_ewma_alpha=policy.monitor.cost_ewma_alpha)
        if classifier == "auto":
            classifier = load_classifier()
        return cls(store, monitor, loaded_engines, classifier)

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self, watch_policy: bool = True, watch_interval: float = 1.0, install_sighup: bool = True) -> None:
        """Start periodic state saving, the policy file watcher, and (from the main thread) reload on
        SIGHUP; without a handler SIGHUP would terminate the process."""
        if self._autosaver is None and self.monitor.state_path is not None:
            self._autosaver = Autosaver(self.monitor, self.store.policy.state.persist_interval_seconds)
            self._autosaver.start()
        if watch_policy:
            self.store.start_watching(watch_interval)
        if install_sighup and hasattr(signal, "SIGHUP") and threading.current_thread() is threading.main_thread():
            self._previous_sighup = signal.getsignal(signal.SIGHUP)
            self.store.install_sighup_handler()

    def close(self) -> None:
        """Stop the threads, restore the SIGHUP handler and save the state one last time."""
        if self._previous_sighup is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGHUP, self._previous_sighup)
            self._previous_sighup = None
        self.store.stop_watching()
        if self._autosaver is not None:
            self._autosaver.stop()
            self._autosaver = None
        else:
            self.monitor.save()

    def reload(self, trigger: str = "admin") -> ReloadResult:
        """For POST /admin/reload: re-read the policy file (invalid => old policy stays)."""
        return self.store.reload(trigger)

    def _on_reload(self, snapshot: PolicySnapshot) -> None:
        self.monitor.set_ewma_alpha(snapshot.policy.monitor.ewma_alpha, snapshot.policy.monitor.cost_ewma_alpha)
        self.monitor.set_timing(snapshot.policy.monitor.first_use_steps, snapshot.policy.monitor.stall_factor)
        self.monitor.set_context_bands(snapshot.policy.monitor.context_bands)
        if self._autosaver is not None:
            self._autosaver.set_interval(snapshot.policy.state.persist_interval_seconds)
        self._warn_unloaded(snapshot.policy)

    def _warn_unloaded(self, policy: Policy) -> None:
        missing = [e for e in policy.engines.enabled() if e not in self._loaded]
        if missing:  # a warning when an operator's file asks for them; the built-in defaults enable all
            level = logging.WARNING if self.store.path is not None else logging.INFO
            log.log(level, "policy enables engines that are not loaded: %s (their requests go elsewhere)", missing)

    # --- classification -----------------------------------------------------------------------
    def classify(self, request: RouteRequest, policy: Policy) -> str:
        return self.classify_with_confidence(request, policy)[0]

    def classify_with_confidence(self, request: RouteRequest, policy: Policy) -> tuple[str, bool]:
        """(label, uncertain). Uncertain = the classifier's max probability is below the policy's
        classifier.uncertain_below; the default class (no or failed classifier) is uncertain too."""
        if request.text.response_format in STRUCTURED_RESPONSE_FORMATS:
            return "structured", False
        if self.classifier is None:
            return policy.default_class, False  # an operator's fixed choice, not a guess
        try:
            prediction = self.classifier.predict(request.text)
        except Exception:  # routing must never fail a request; count and use the default class
            self._classifier_errors += 1
            log.exception("classifier failed; using default class %s", policy.default_class)
            return policy.default_class, True
        if prediction.label not in CLASSES:
            return policy.default_class, True
        confidence = max(prediction.probs.values(), default=0.0)
        return prediction.label, confidence < policy.classifier.uncertain_below

    # --- predictions --------------------------------------------------------------------------
    def predict(self, klass: str, engine: str, policy: Policy, sampled: bool = False,
                context: int | None = None) -> ArmPrediction:
        """The arm's prediction for a request whose context is `context` tokens (its cost band)."""
        prior_accepted, prior_cost = policy.prior(klass, engine)
        return self.monitor.predict(
            klass,
            engine,
            prior_accepted,
            prior_cost,
            policy.monitor.warmup,
            policy.engines.raw.prior_tokens_per_second,
            policy.exploration.thompson_prior_sd,
            sampled,
            policy.monitor.cost_warmup,
            context,
        )

    def band_costs(self) -> list[tuple[str, str, int, float]]:
        """(engine, mode, band, c): the step cost ratio a request in each context band is priced at, per
        enabled speculative engine and decoding mode (the band's measurement, else the overall ratio,
        else the prior)."""
        policy = self.store.policy
        return [(engine, "sampled" if sampled else "greedy", band,
                 self.predict(POOLED_CLASS, engine, policy, sampled, context=band).cost)
                for band in (0, *policy.monitor.context_bands) for sampled in (False, True)
                for engine in policy.engines.enabled() if engine != "raw"]

    def _is_healthy(self, engine: str, now: float) -> bool:
        return engine in self._loaded and self._quarantine_until.get(engine, 0.0) <= now

    def _argmax(self, arm: tuple[str, bool], predicted: Mapping[str, float], candidates: Sequence[str], margin: float) -> str:
        """arm = (class, sampled): each keeps its own incumbent for the hysteresis."""
        best = max(candidates, key=lambda e: predicted[e])
        incumbent = self._incumbent.get(arm)
        if incumbent in candidates and incumbent != best and predicted[best] <= predicted[incumbent] * (1.0 + margin):
            return incumbent  # hysteresis: a near-tie does not switch engines
        return best

    def _thompson(self, klass: str, predictions: Mapping[str, ArmPrediction], candidates: Sequence[str]) -> str:
        def draw(engine: str) -> float:
            p = predictions[engine]
            if engine == "raw":
                return p.tokens_per_second
            accepted = max(0.0, self._rng.gauss(p.accepted, p.accepted_sd))
            cost = max(0.05, self._rng.gauss(p.cost, p.cost_sd))
            raw_rate = p.tokens_per_second / p.speedup if p.speedup > 0 else 0.0
            return raw_rate * (1.0 + accepted) / cost

        return max(candidates, key=draw)

    # --- Router protocol ------------------------------------------------------------------------
    def choose(self, request: RouteRequest) -> RouteDecision:
        snapshot = self.store.current()
        policy = snapshot.policy
        self._remember(snapshot)
        klass, uncertain = self.classify_with_confidence(request, policy)
        stats_class = POOLED_CLASS if uncertain else klass  # whose statistics route (and learn from) it
        enabled = policy.engines.enabled()
        mode = request.sampled
        predictions = {engine: self.predict(stats_class, engine, policy, mode, request.prompt_tokens)
                       for engine in enabled}
        predicted = {engine: p.tokens_per_second for engine, p in predictions.items()}
        batching = policy.batching
        batch_costs = self.monitor.batch_costs(batching.prior_row_cost, batching.max_rows, batching.cost_warmup) \
            if batching.enabled else ()

        def decide(engine: str, reason: str, with_switch: bool = True, probe: bool = True) -> RouteDecision:
            rule = self._switch_rule(engine, predictions, policy, healthy, mode, probe, batch_costs) if with_switch else None
            decision = RouteDecision(engine, klass, reason, rule, predicted, snapshot.version, mode, uncertain,
                                     request.prompt_tokens)
            with self._lock:  # bounded labels: a forced engine name is whatever the client sent
                self._decisions[(klass, engine if engine in ENGINE_NAMES else "other", reason)] += 1
            return decision

        forced = request.forced_engine
        if forced and forced != "auto":
            return decide(forced, "forced", with_switch=False)  # an explicit engine is served as asked

        now = self._clock()
        with self._lock:
            healthy = [e for e in enabled if self._is_healthy(e, now)]
        queue_deep = request.queue_depth > policy.queue.raw_above_depth

        for rule in policy.rules:
            if rule.when.matches(klass, request.prompt_tokens, request.text.response_format):
                if rule.engine in healthy:  # the operator's choice: only the hand-off to raw may undo it
                    return decide(rule.engine, "rule", probe=False)
                return decide("raw" if queue_deep else self._argmax((stats_class, mode), predicted, healthy, 0.0), "health")

        with self._lock:
            preferred = self._argmax((stats_class, mode), predicted, enabled, policy.monitor.switch_margin)
            self._incumbent[(stats_class, mode)] = preferred
        if preferred not in healthy:
            return decide("raw" if queue_deep else self._argmax((stats_class, mode), predicted, healthy, 0.0), "health")
        if queue_deep:
            return decide("raw", "fallback", with_switch=False)  # busy: no probing, no speculation
        if policy.batching.enabled and request.concurrent > 0 and "raw" in healthy:
            return decide(self._cheapest_under_load(predictions, healthy, batch_costs, request.concurrent), "load",
                          probe=False)

        exploration = policy.exploration
        if exploration.kind != "none" and exploration.try_untested:
            def measured(engine: str) -> bool:   # raw needs no evidence; a speculative arm, warmup verifies
                return engine == "raw" or predictions[engine].n_accepted >= policy.monitor.warmup

            untested = [e for e in healthy if not measured(e)]
            if untested and measured(preferred):   # the predicted best is measured first, then the rest
                return decide(untested[0], "explore")
            # a context band's costs are measured on its own requests once a speculative engine has been
            # timed at all: raw's steps first (every ratio needs them), then each timed engine's, a request
            # each until cost_warmup steps are timed in the band
            warm = policy.monitor.cost_warmup
            timed = {e for e in healthy if e != "raw" and self.monitor.timed_steps(e, mode) >= warm}

            def unpriced(engine: str) -> bool:
                in_band = self.monitor.timed_in_band(engine, mode, request.prompt_tokens)
                return bool(timed) and in_band is not None and in_band < warm and (engine == "raw" or engine in timed)

            to_price = [e for e in sorted(healthy, key=lambda e: e != "raw") if unpriced(e)]
            if to_price and to_price[0] != preferred:
                return decide(to_price[0], "explore")
        if exploration.kind == "epsilon" and len(healthy) > 1 and self._rng.random() < exploration.epsilon:
            return decide(self._rng.choice([e for e in healthy if e != preferred]), "explore")
        if exploration.kind == "thompson" and len(healthy) > 1:
            sampled = self._thompson(stats_class, predictions, healthy)
            if sampled != preferred:
                return decide(sampled, "explore")
        return decide(preferred, "monitor")

    @staticmethod
    def _cheapest_under_load(predictions: Mapping[str, ArmPrediction], healthy: Sequence[str],
                             batch_costs: Sequence[float], others: int) -> str:
        """The engine whose tokens cost the worker least while `others` requests run: raw joins the
        batch at its marginal cost c(B+1) - c(B); a speculative engine runs its cycles alone, c_e per
        1 + alpha tokens. Ties go to raw (it also frees the worker for the others sooner)."""
        def per_token(engine: str) -> float:
            if engine == "raw":
                return marginal_batch_cost(batch_costs, others)
            p = predictions[engine]
            return p.cost / (1.0 + p.accepted)

        return min(sorted(healthy, key=lambda e: e != "raw"), key=per_token)

    # --- admission (the latency SLO) --------------------------------------------------------------
    def admission_limit(self, reading: LoadReading) -> AdmissionLimit:
        """How many requests may run at once under the policy's batching.max_token_latency_ms (the
        scheduler asks every round, on the worker thread; the live policy applies at once)."""
        batching = self.store.policy.batching
        slo_ms = batching.max_token_latency_ms
        limit = AdmissionLimit() if slo_ms is None else AdmissionLimit(
            self._streams_within(reading, slo_ms / 1000.0, batching), batching.slo_exempt_priority)
        with self._lock:
            self._admission = (reading, limit)
        return limit

    def _streams_within(self, reading: LoadReading, slo_seconds: float, batching: BatchingPolicy) -> int:
        """The most streams whose per-token latency stays under the SLO, at least 1. With latency L
        measured while B requests ran, n streams are predicted to take L c(n) / c(B) per token, c(n)
        being the monitor's cost of a batched step of n rows (as routing uses it). So while L is over
        the SLO nobody new starts; under it, the cap admits the streams predicted to fit. Until a
        latency is measured, a request starts only when nothing runs."""
        if reading.token_seconds is None or reading.measured_running < 1:
            return max(1, reading.running)
        costs = self.monitor.batch_costs(batching.prior_row_cost, max(2, reading.max_running), batching.cost_warmup)

        def cost(rows: int) -> float:
            return costs[rows - 1] if rows <= len(costs) else costs[-1] + (rows - len(costs)) * (costs[-1] - costs[-2])

        per_cost = reading.token_seconds / cost(reading.measured_running)
        streams = 1
        while streams < reading.max_running and per_cost * cost(streams + 1) <= slo_seconds:
            streams += 1
        return streams

    def admission_stats(self) -> dict:
        """The latency SLO as the worker last applied it (GET /v1/router/stats → `admission`)."""
        slo_ms = self.store.policy.batching.max_token_latency_ms
        with self._lock:
            last = self._admission
        stats: dict = {"max_token_latency_ms": slo_ms, "token_latency_ms": None, "measured_running": 0,
                       "running": 0, "running_limit": None, "slo_exempt_priority": None}
        if last is not None:
            reading, limit = last
            stats.update(
                token_latency_ms=reading.token_seconds * 1000.0 if reading.token_seconds is not None else None,
                measured_running=reading.measured_running, running=reading.running,
                running_limit=reading.max_running if limit.requests is None else min(limit.requests,
                                                                                     reading.max_running),
                slo_exempt_priority=limit.exempt_priority)
        return stats

    def _switch_rule(
        self, engine: str, predictions: Mapping[str, ArmPrediction], policy: Policy, healthy: Sequence[str],
        sampled: bool, probe: bool = True, batch_costs: Sequence[float] = (),
    ) -> SwitchRule | None:
        """The request's switching rule: raw is always a target of a speculative engine (the
        hand-off); other healthy speculative engines are targets while probed."""
        if not policy.fallback.enabled or engine not in predictions:
            return None
        evidence, switching = policy.fallback, policy.switching
        probing = probe and switching.probe_steps > 0
        speculative = tuple(e for e in healthy if e != "raw" and e != engine) if probing else ()
        targets = speculative + (("raw",) if engine != "raw" else ())
        if not targets:
            return None
        return SwitchRule(
            window=evidence.window, margin=evidence.margin, evidence_z=evidence.evidence_z,
            costs={e: p.cost for e, p in predictions.items()},
            step_sd={e: p.accepted_step_sd for e, p in predictions.items()},
            targets=targets, probe_steps=switching.probe_steps if speculative else 0,
            probe_every=switching.probe_every, batch_costs=tuple(batch_costs),
            expected={e: p.accepted for e, p in predictions.items() if e != "raw"},
            persistence={e: self.monitor.persistence(e, sampled, evidence.persistence_warmup,
                                                     evidence.persistence_prior)
                         for e in predictions if e != "raw"},
        )

    def observe(self, decision: RouteDecision, step: StepResult) -> None:
        key = id(decision)
        with self._lock:
            seen, generated = self._open_steps.get(key, (0, 0))
            self._open_steps[key] = (seen + 1, generated + len(step.tokens))
            if len(self._open_steps) > _MAX_OPEN_REQUESTS:
                self._open_steps.popitem(last=False)
            pair = self._next_window(key, decision, step) if step.drafted > 0 else None
        # the first step's wall time includes the prefill, and the second one's the engine's own share of it
        # (the MTP head's rows and the drafter's context over the prompt are evaluated with the first cycle,
        # ~0.2 ms a prompt token on the demo's CPU): count their tokens, not their time
        klass = POOLED_CLASS if decision.pooled else decision.klass
        self.monitor.observe(klass, step, timed=seen > 1, sampled=decision.sampled,
                             context=decision.context_tokens + generated)
        if pair is not None:
            self.monitor.observe_windows(step.engine, *pair, sampled=decision.sampled)

    def _next_window(self, key: int, decision: RouteDecision, step: StepResult) -> tuple[float, float] | None:
        """Cut the request's verifies into consecutive windows of the fallback's size, per running engine;
        returns (previous, this) window means when one completes after another."""
        track = self._windows.get(key)
        if track is None or track.engine != step.engine:
            snapshot = self._snapshots.get(decision.policy_version) or self.store.current()
            track = self._windows[key] = _WindowTrack(step.engine, snapshot.policy.fallback.window)
            if len(self._windows) > _MAX_OPEN_REQUESTS:   # oldest first (insertion order), as _open_steps
                self._windows.pop(next(iter(self._windows)))
        return track.add(float(step.accepted))

    def finished(self, decision: RouteDecision, error: BaseException | None) -> None:
        with self._lock:
            self._open_steps.pop(id(decision), None)
            self._windows.pop(id(decision), None)
        if error is None or isinstance(error, (InvalidRequestError, EngineUnavailableError)):
            return
        if not isinstance(error, Exception):  # cancellation / shutdown is not the engine's fault
            return
        engine = error.engine if isinstance(error, EngineFailure) else decision.engine
        if engine == "raw":
            log.error("raw engine failed (%s); raw is never quarantined", error)
            return
        snapshot = self._snapshots.get(decision.policy_version, self.store.current())
        seconds = snapshot.policy.quarantine_seconds
        with self._lock:
            self._quarantine_until[engine] = self._clock() + seconds
        log.warning("engine %s quarantined for %.0f s after: %s", engine, seconds, error)

    def _remember(self, snapshot: PolicySnapshot) -> None:
        with self._lock:
            if snapshot.version not in self._snapshots:
                self._snapshots[snapshot.version] = snapshot
                while len(self._snapshots) > _KEPT_SNAPSHOTS:
                    self._snapshots.popitem(last=False)

    # --- export ---------------------------------------------------------------------------------
    def decision_counts(self) -> list[tuple[str, str, str, int]]:
        """(class, engine, reason, count) of every decision so far."""
        with self._lock:
            return [(k, e, r, n) for (k, e, r), n in sorted(self._decisions.items())]

    def quarantined(self) -> dict[str, float]:
        """engine -> seconds of quarantine left."""
        now = self._clock()
        with self._lock:
            return {e: until - now for e, until in self._quarantine_until.items() if until > now}

    def _arm_stats(self, klass: str, policy: Policy, sampled: bool) -> dict:
        arms = {}
        for engine in policy.engines.enabled():
            p = self.predict(klass, engine, policy, sampled)
            arms[engine] = {
                "predicted_tokens_per_second": p.tokens_per_second,
                "predicted_speedup": p.speedup,
                "accepted_per_step": p.accepted,
                "cost_ratio": p.cost,
                "accepted_observations": p.n_accepted,
                "cost_observations": p.n_cost,
                "warm": p.n_accepted >= policy.monitor.warmup if engine != "raw" else True,
            }
        return {"engines": arms, "incumbent": self._incumbent.get((klass, sampled))}

    def stats(self) -> dict:
        """JSON for GET /v1/router/stats."""
        policy = self.store.policy
        classes: dict[str, dict] = {}
        for klass in CLASSES:
            greedy = self._arm_stats(klass, policy, sampled=False)
            classes[klass] = {**greedy, "sampled": self._arm_stats(klass, policy, sampled=True)}
        decisions = [{"class": k, "engine": e, "reason": r, "count": n} for k, e, r, n in self.decision_counts()]
        return {
            "classes": classes,
            "measured": self.monitor.snapshot(),
            # c(B) as routing uses it now: measured per batch size, the policy's prior where unmeasured
            "batch_costs": list(self.monitor.batch_costs(policy.batching.prior_row_cost, policy.batching.max_rows,
                                                         policy.batching.cost_warmup)) if policy.batching.enabled else [],
            "admission": self.admission_stats(),
            "loaded_engines": sorted(self._loaded),
            "enabled_engines": list(policy.engines.enabled()),
            "quarantined": self.quarantined(),
            "decisions": decisions,
            "classifier_errors": self._classifier_errors,
            "policy": self.store.counters(),
            "state_file": {
                "path": str(self.monitor.state_path) if self.monitor.state_path else None,
                "load_error": self.monitor.load_error,
            },
        }

    def gauge_values(self) -> list[tuple[str, str, str, float]]:
        """(class, engine, metric, value) for Prometheus gauges, metric names without prefix."""
        policy = self.store.policy
        measured = self.monitor.snapshot()["arms"]
        rows: list[tuple[str, str, str, float]] = []
        for klass in CLASSES:
            for engine in policy.engines.enabled():
                p = self.predict(klass, engine, policy)
                rows.append((klass, engine, "predicted_tokens_per_second", p.tokens_per_second))
                rows.append((klass, engine, "predicted_speedup", p.speedup))
                rows.append((klass, engine, "accepted_per_step", p.accepted))
                rows.append((klass, engine, "step_cost_ratio", p.cost))
                # the mode (greedy or sampled) that carried most of this arm's traffic
                arms = [measured.get(f"{klass}/{engine}"), measured.get(f"{klass}/{engine}/sampled")]
                busiest = max((a for a in arms if a), key=lambda a: a["steps"], default={})
                tps = busiest.get("tokens_per_second")
                # NaN (Prometheus' "no value") until the arm has a timed step: the series exists from
                # the first scrape, a panel shows a gap rather than "No data" or a false 0
                rows.append((klass, engine, "measured_tokens_per_second",
                             tps if tps is not None and math.isfinite(tps) else math.nan))
        return rows
