"""Metrics read at scrape time (model memory, loaded engines, policy info) and the classifier timer.

No MLX import here: versions come from package metadata, memory from Backend.memory_bytes().
"""

from __future__ import annotations

import logging
import platform
import time
from importlib import metadata
from typing import Any, Callable, Iterator

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from contracts.engine import Backend
from contracts.names import ENGINE_NAMES, SAMPLED_SUFFIX

log = logging.getLogger("switchyard.metrics")

# Keys of Runtime.memory_bytes(); anything else is summed under "other".
MEMORY_KINDS: tuple[str, ...] = ("parameters", "mtp_head", "drafter", "prefix_cache", "active", "peak")
# Backend.prefix_cache_stats() keys exported as counters (monotonic) and gauges (current size)
PREFIX_COUNTERS = (("lookups", "Prefix cache lookups (one per prefill)"),
                   ("hits", "Prefills that resumed from a cached prefix"),
                   ("cached_tokens", "Prompt tokens restored from the prefix cache instead of computed"),
                   ("evictions", "Prefix cache entries evicted to stay within the byte limit"))
PREFIX_GAUGES = (("bytes", "Bytes held by the prefix cache"), ("entries", "Prefix snapshots held"),
                 ("max_bytes", "The prefix cache's byte limit (0: disabled)"))
# Backend.batch_stats() keys: the raw decoding batch (continuous batching)
BATCH_COUNTERS = (("steps", "Batched raw decode steps (one forward shared by every row)"),
                  ("row_steps", "Tokens produced by batched raw decode steps (rows summed over steps)"))
BATCH_GAUGES = (("rows", "Requests in the raw decoding batches now"),
                ("groups", "Raw decoding batches now: rows of like context lengths share one (padding bound)"),
                ("generating", "Requests the model is generating now (prefill, speculative or raw)"),
                ("max_rows", "Most requests one raw decoding batch holds (0: batching off)"))
EXPLORATION_KINDS: tuple[str, ...] = ("none", "epsilon", "thompson")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def build_info_labels() -> dict[str, str]:
    return {
        "version": _version("switchyard"),
        "python_version": platform.python_version(),
        "mlx_version": _version("mlx"),
        "mlx_lm_version": _version("mlx-lm"),
    }


class CallbackCounter(Collector):
    """A counter kept elsewhere (the scheduler's), read at scrape time."""

    def __init__(self, name: str, documentation: str, read: Callable[[], float]):
        self._name, self._documentation, self._read = name, documentation, read

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self._name, self._documentation, value=float(self._read()))


class BackendCollector(Collector):
    """switchyard_model_memory_bytes{kind} and switchyard_engine_loaded{engine}."""

    def __init__(self, backend: Backend):
        self._backend = backend

    def collect(self) -> Iterator[Metric]:
        memory = GaugeMetricFamily(
            "switchyard_model_memory_bytes",
            "Model memory by kind: parameters, mtp_head, drafter (weights); prefix_cache; active, peak (MLX allocator)",
            labels=["kind"],
        )
        try:
            values = self._backend.memory_bytes()
        except Exception:  # a scrape must never fail because of the backend
            log.exception("memory_bytes() failed")
            values = {}
        other = 0.0
        for kind, value in values.items():
            if kind in MEMORY_KINDS:
                memory.add_metric([kind], float(value))
            else:
                other += float(value)
        if other:
            memory.add_metric(["other"], other)
        yield memory
        loaded = GaugeMetricFamily("switchyard_engine_loaded", "1 for each decoding engine loaded", labels=["engine"])
        for engine in ENGINE_NAMES:
            loaded.add_metric([engine], 1.0 if engine in self._backend.engine_names else 0.0)
        yield loaded
        yield from self._stats("prefix_cache_stats", "switchyard_prefix_cache", PREFIX_COUNTERS, PREFIX_GAUGES)
        yield from self._stats("batch_stats", "switchyard_batch", BATCH_COUNTERS, BATCH_GAUGES)
        yield from self._cycle_modes()

    def _cycle_modes(self) -> Iterator[Metric]:
        """Which cycle each speculative engine runs on this machine (engines/cycle_modes.py)."""
        try:
            stats = getattr(self._backend, "cycle_mode_stats", lambda: {})() or {}
        except Exception:  # a scrape must never fail because of the backend
            log.exception("cycle_mode_stats() failed")
            stats = {}
        seconds = GaugeMetricFamily(
            "switchyard_spec_cycle_seconds",
            "Seconds per speculative cycle by engine, decoding (greedy/sampled) and mode (pipelined: the verdict "
            "read one cycle late; host)", labels=["engine", "decoding", "mode"])
        pipelined = GaugeMetricFamily(
            "switchyard_spec_cycle_pipelined",
            "1 if the engine runs pipelined cycles, 0 host cycles, NaN while it still measures both",
            labels=["engine", "decoding"])
        for engine in (e for e in ENGINE_NAMES if e != "raw"):
            for decoding, suffix in (("greedy", ""), ("sampled", SAMPLED_SUFFIX)):
                row = stats.get(engine + suffix, {})
                for mode in ("pipelined", "host"):
                    measured = float(row.get(f"{mode}_seconds", 0.0))
                    seconds.add_metric([engine, decoding, mode], measured if measured > 0 else float("nan"))
                pipelined.add_metric([engine, decoding], float(row.get("pipelined", float("nan"))))
        yield seconds
        yield pipelined

    def _stats(self, method: str, prefix: str, counters: tuple, gauges: tuple) -> Iterator[Metric]:
        """A Backend stats dict (prefix cache, decode batch) as counters and gauges; zeros when off."""
        try:
            stats = getattr(self._backend, method, lambda: None)() or {}
        except Exception:  # a scrape must never fail because of the backend
            log.exception("%s() failed", method)
            stats = {}
        for key, text in counters:
            counter = CounterMetricFamily(f"{prefix}_{key}", text)
            counter.add_metric([], float(stats.get(key, 0)))
            yield counter
        for key, text in gauges:
            yield GaugeMetricFamily(f"{prefix}_{key}", text, value=float(stats.get(key, 0)))


class PolicyInfoCollector(Collector):
    """What the policy in force says, from a gateway.policy_watch.PolicyStore (the router's
    RouterCollector exports the reload counters, timestamp and version)."""

    def __init__(self, store: Any):
        self._store = store

    def collect(self) -> Iterator[Metric]:
        snapshot = self._store.current()
        policy = snapshot.policy
        info = GaugeMetricFamily(
            "switchyard_policy_info", "Always 1; the policy in force (source file or built-in defaults)",
            labels=["source", "exploration", "default_class"],
        )
        kind = policy.exploration.kind
        info.add_metric(
            ["defaults" if snapshot.source == "<defaults>" else "file",
             kind if kind in EXPLORATION_KINDS else "other", policy.default_class],
            1.0,
        )
        yield info
        enabled = GaugeMetricFamily(
            "switchyard_policy_engine_enabled", "1 for each engine the policy enables", labels=["engine"]
        )
        on = set(policy.engines.enabled())
        for engine in ENGINE_NAMES:
            enabled.add_metric([engine], 1.0 if engine in on else 0.0)
        yield enabled
        last_failure = getattr(self._store, "last_failure_time", None)
        last_success = getattr(self._store, "last_success_time", 0.0)
        ok = last_failure is None or last_success >= last_failure
        yield GaugeMetricFamily(
            "switchyard_policy_last_reload_ok",
            "1 if the latest policy load/reload attempt succeeded, 0 if it was rejected (old policy kept)",
            value=1.0 if ok else 0.0,
        )


class TimedClassifier:
    """Wraps the router's classifier: observes each predict() into a latency histogram."""

    def __init__(self, classifier: Any, histogram: Histogram):
        self.inner = classifier
        self._histogram = histogram

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.inner.predict(*args, **kwargs)
        finally:
            self._histogram.observe(time.perf_counter() - started)

    def __getattr__(self, name: str) -> Any:  # anything else the router may read from the classifier
        return getattr(self.inner, name)
