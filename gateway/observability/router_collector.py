"""Prometheus view of the router: monitor gauges, quarantine and policy-reload bookkeeping.

A custom collector reads the router at scrape time, so nothing has to push values on every step.
Register it once: `registry.register(RouterCollector(router))`.
"""

from __future__ import annotations

from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from contracts.names import CLASSES, ROUTE_REASONS
from gateway.routing.router import AdaptiveRouter

_GAUGE_HELP = {
    "predicted_tokens_per_second": "Router's predicted decode tokens/s per class and engine (priors blended in).",
    "predicted_speedup": "Predicted speedup over raw, (1 + accepted per step) / step cost ratio.",
    "accepted_per_step": "Estimated accepted draft tokens per verify step (EWMA, priors while warming up).",
    "step_cost_ratio": "Estimated cost of one engine step relative to one raw step.",
    "measured_tokens_per_second": "EWMA of measured decode tokens/s per class and engine.",
}


class RouterCollector(Collector):
    def __init__(self, router: AdaptiveRouter, prefix: str = "switchyard_router_"):
        self._router = router
        self._prefix = prefix

    def collect(self) -> Iterator[Metric]:
        families = {
            name: GaugeMetricFamily(self._prefix + name, help_text, labels=["class", "engine"])
            for name, help_text in _GAUGE_HELP.items()
        }
        for klass, engine, metric, value in self._router.gauge_values():
            families[metric].add_metric([klass, engine], value)
        yield from families.values()

        bands = GaugeMetricFamily(
            self._prefix + "context_cost_ratio",
            "Cost of one engine step relative to one raw step that a request in this context band (its lower "
            "edge in tokens) is priced at, per decoding mode: the band's measurement once timed, else the "
            "ratio over all contexts, else the prior.", labels=["engine", "mode", "band"])
        for engine, mode, band, cost in self._router.band_costs():
            bands.add_metric([engine, mode, str(band)], cost)
        yield bands

        quarantined = GaugeMetricFamily(
            self._prefix + "engine_quarantined", "1 while an engine is quarantined after an error.", labels=["engine"]
        )
        left = self._router.quarantined()
        for engine in self._router.store.policy.engines.enabled():
            quarantined.add_metric([engine], 1.0 if engine in left else 0.0)
        yield quarantined

        decisions = CounterMetricFamily(
            "switchyard_route_decisions", "Routing decisions by class, engine and reason.",
            labels=["class", "engine", "reason"],
        )
        counts = {(k, e, r): n for k, e, r, n in self._router.decision_counts()}
        for klass in CLASSES:   # every (class, enabled engine, reason) from the first scrape, at 0
            for engine in self._router.store.policy.engines.enabled():
                for reason in ROUTE_REASONS:
                    counts.setdefault((klass, engine, reason), 0)
        for (klass, engine, reason), count in sorted(counts.items()):
            decisions.add_metric([klass, engine, reason], count)
        yield decisions

        counters = self._router.store.counters()
        reloads = CounterMetricFamily(
            "switchyard_policy_reloads", "Policy reload attempts by result.", labels=["result"]
        )
        reloads.add_metric(["success"], counters["reload_successes"])
        reloads.add_metric(["failure"], counters["reload_failures"])
        yield reloads
        yield GaugeMetricFamily(
            "switchyard_policy_last_reload_success_timestamp_seconds",
            "Unix time of the last successful policy load.",
            value=counters["last_success_time"],
        )
        yield GaugeMetricFamily("switchyard_policy_version", "Policy snapshot version in force.", value=counters["version"])
