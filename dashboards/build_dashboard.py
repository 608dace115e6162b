"""Writes dashboards/switchyard.json, the Grafana dashboard (run: python dashboards/build_dashboard.py).

The JSON is committed; tests check it equals this script's output, that every expression parses
(promtool) and runs on a real Prometheus, and that every metric it names exists in /metrics.
Every panel uses the `datasource` template variable, so the file imports through the UI and
loads through provisioning alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.observability.metrics import GENERATION_ENDPOINTS

OUT = Path(__file__).resolve().parent / "switchyard.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'instance=~"$instance"'  # every query is filtered by the instance variable
RATE = "$__rate_interval"


def q(metric: str, extra: str = "") -> str:
    """`metric{instance=~"$instance", extra}`."""
    return f"{metric}{{{SEL}{', ' + extra if extra else ''}}}"


def rate(metric: str, extra: str = "") -> str:
    return f"rate({q(metric, extra)}[{RATE}])"


def quantiles(hist: str, by: str = "", qs: tuple[float, ...] = (0.5, 0.9, 0.99)) -> list[tuple[str, str]]:
    keys = "le" + (f", {by}" if by else "")
    legend = (f"{{{{{by}}}}} " if by else "")
    return [
        (f"histogram_quantile({x}, sum by ({keys}) ({rate(hist + '_bucket')}))", f"{legend}p{int(x * 100)}")
        for x in qs
    ]


def ratio(num: str, den: str, by: str) -> str:
    return f"sum by ({by}) ({num}) / sum by ({by}) ({den}) > -1"  # `> -1` drops NaN from 0/0


class Layout:
    """Left-to-right, top-to-bottom placement on Grafana's 24-column grid."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1

    def _place(self, w: int, h: int) -> dict[str, int]:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def row(self, title: str) -> None:
        self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        self.panels.append({"type": "row", "title": title, "id": self._id(), "collapsed": False,
                            "gridPos": self._place(24, 1), "panels": []})

    def panel(self, kind: str, title: str, targets: list[tuple[str, str]], unit: str = "short",
              w: int = 8, h: int = 8, description: str = "", options: dict | None = None,
              custom: dict | None = None, instant: bool = False) -> None:
        refs = "ABCDEFGHIJ"
        self.panels.append({
            "type": kind,
            "title": title,
            "description": description,
            "id": self._id(),
            "gridPos": self._place(w, h),
            "datasource": DS,
            "targets": [
                {"refId": refs[i], "datasource": DS, "expr": expr, "legendFormat": legend,
                 **({"instant": True, "range": False, "format": "table"} if instant else {})}
                for i, (expr, legend) in enumerate(targets)
            ],
            "fieldConfig": {"defaults": {"unit": unit, **({"custom": custom} if custom else {})}, "overrides": []},
            "options": options or {},
        })

    def timeseries(self, title: str, targets: list[tuple[str, str]], unit: str = "short", stacked: bool = False,
                   **kw: Any) -> None:
        custom = {"fillOpacity": 60 if stacked else 10, "stacking": {"mode": "percent" if stacked else "none"}}
        opts = {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "max"]},
                "tooltip": {"mode": "multi"}}
        self.panel("timeseries", title, targets, unit, custom=custom, options=opts, **kw)

    def stat(self, title: str, expr: str, unit: str = "short", **kw: Any) -> None:
        self.panel("stat", title, [(expr, "")], unit, w=kw.pop("w", 4), h=kw.pop("h", 4),
                   options={"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"}, **kw)


def build() -> dict[str, Any]:
    d = Layout()
    # every API that generates (OpenAI, Anthropic, Responses, Ollama), as the gateway labels them
    gen = f'endpoint=~"{"|".join(GENERATION_ENDPOINTS)}"'

    d.row("Overview")
    d.stat("Requests / s", f"sum({rate('switchyard_requests_total', gen)})", "reqps")
    errors = rate("switchyard_requests_total", gen + ', status=~"5.."')
    d.stat("Error ratio (5xx)", f"sum({errors}) / clamp_min(sum({rate('switchyard_requests_total', gen)}), 1e-9)",
           "percentunit")
    d.stat("Generated tokens / s", f"sum({rate('switchyard_generation_tokens_total')})", "short")
    d.stat("Worker up", f"min({q('switchyard_worker_up')})", "bool_on_off")
    d.stat("Uptime", f"time() - max({q('switchyard_start_time_seconds')})", "s")
    d.stat("Policy version", f"max({q('switchyard_policy_version')})", "none")

    d.row("Throughput")
    d.timeseries("Generated tokens / s by engine",
                 [(f"sum by (engine) ({rate('switchyard_generation_tokens_total')})", "{{engine}}")], "short",
                 description="Completion tokens served per second, by the engine that was routed.")
    d.timeseries("Decode tokens / s by class x engine (monitor)",
                 [(f"max by (class, engine) ({q('switchyard_router_measured_tokens_per_second')})",
                   "{{class}} / {{engine}}")], "short",
                 description="The online monitor's EWMA of tokens/s while decoding (prefill excluded).")
    d.timeseries("Prompt tokens / s by class",
                 [(f"sum by (class) ({rate('switchyard_prompt_tokens_total')})", "{{class}}")], "short")

    d.row("Latency")
    d.timeseries("Time to first token", quantiles("switchyard_time_to_first_token_seconds"), "s")
    d.timeseries("Time per output token by engine", quantiles("switchyard_time_per_output_token_seconds", "engine",
                                                              (0.5, 0.99)), "s")
    d.timeseries("End-to-end latency", quantiles("switchyard_e2e_request_latency_seconds"), "s")
    d.timeseries("Queue time and prefill", [
        *quantiles("switchyard_queue_time_seconds", qs=(0.5, 0.99)),
        *[(e, "prefill " + l) for e, l in quantiles("switchyard_prefill_seconds", qs=(0.5, 0.99))],
    ], "s")
    d.timeseries("Mean engine step time by engine", [(
        ratio(rate("switchyard_engine_step_seconds_sum"), rate("switchyard_engine_step_seconds_count"), "engine"),
        "{{engine}}")], "s", description="Wall time of one decode step or draft+verify cycle.")
    d.timeseries("Step cost ratio vs raw (monitor)",
                 [(f"max by (class, engine) ({q('switchyard_router_step_cost_ratio')})", "{{class}} / {{engine}}")],
                 "short", description="c_e: one engine step relative to one raw step (priors blended in).")
    d.timeseries("Step cost ratio by context band (monitor)",
                 [(f"max by (engine, mode, band) ({q('switchyard_router_context_cost_ratio')})",
                   "{{engine}} {{mode}} ≥ {{band}} tokens")],
                 "short", description="c_e measured within one band of context length: a verify attends T rows "
                 "over the context where a raw step attends one, so the ratio grows with the context.")

    d.row("Speculation")
    d.timeseries("Acceptance rate by engine x class", [(ratio(
        rate("switchyard_spec_accepted_tokens_total"), rate("switchyard_spec_draft_tokens_total"), "engine, class"),
        "{{engine}} / {{class}}")], "percentunit",
        description="Accepted draft tokens / drafted tokens. DDTree drafts a whole tree, so its rate is lower by design.")
    d.timeseries("Mean accepted tokens per verify step", [(ratio(
        rate("switchyard_spec_accepted_tokens_per_step_sum"), rate("switchyard_spec_accepted_tokens_per_step_count"),
        "engine, class"), "{{engine}} / {{class}}")], "short",
        description="alpha in speedup = (1 + alpha) / c. Break-even is alpha = c - 1.")
    d.timeseries("Acceptance by draft position", [(ratio(
        rate("switchyard_spec_position_accepted_total"), rate("switchyard_spec_position_drafted_total"),
        "engine, position"), "{{engine}} pos {{position}}")], "percentunit")
    d.timeseries("Accepted tokens per step (distribution)", [
        (f"sum by (le) ({rate('switchyard_spec_accepted_tokens_per_step_bucket')})", "le {{le}}")], "short",
        description="Cumulative buckets: le=0 counts verify steps that accepted nothing.")
    d.timeseries("Predicted speedup over raw (monitor)", [
        (f"max by (class, engine) ({q('switchyard_router_predicted_speedup')})", "{{class}} / {{engine}}")], "short")
    d.timeseries("Mid-request hand-offs to raw / s", [
        (f"sum by (engine) ({rate('switchyard_engine_handoffs_total')})", "{{engine}}")], "short")
    d.timeseries("Speculative cycle time by mode", [
        (f"max by (engine, decoding, mode) ({q('switchyard_spec_cycle_seconds')})",
         "{{engine}} {{decoding}} {{mode}}")], "s",
        description="Pipelined (the verdict read one cycle late) vs host cycles; on a GPU each engine runs the cheaper "
                    "(switchyard_spec_cycle_pipelined), on the CPU backend the host cycle.")

    d.row("Routing")
    d.timeseries("Route mix by engine", [
        (f"sum by (engine) ({rate('switchyard_route_decisions_total')})", "{{engine}}")], "percentunit",
        stacked=True)
    d.timeseries("Route decisions by reason", [
        (f"sum by (reason) ({rate('switchyard_route_decisions_total')})", "{{reason}}")], "short")
    d.timeseries("Route mix by class x engine", [
        (f"sum by (class, engine) ({rate('switchyard_route_decisions_total')})", "{{class}} / {{engine}}")], "short")
    d.timeseries("Classifier latency", quantiles("switchyard_classifier_latency_seconds", qs=(0.5, 0.99)), "s",
                 description="Budget: p99 under 1 ms.")
    d.timeseries("Engines quarantined", [
        (f"max by (engine) ({q('switchyard_router_engine_quarantined')})", "{{engine}}")], "bool")
    d.timeseries("Requests by class", [
        (f"sum by (class) ({rate('switchyard_requests_total', gen)})", "{{class}}")], "reqps")

    d.row("Capacity")
    d.timeseries("Queue and running", [
        (f"sum({q('switchyard_requests_waiting')})", "waiting"),
        (f"sum({q('switchyard_requests_waiting_memory')})", "waiting for memory"),
        (f"sum({q('switchyard_requests_running')})", "running"),
        (f"max({q('switchyard_draining')})", "draining"),
    ], "short")
    d.timeseries("Responses by status", [
        (f"sum by (status) ({rate('switchyard_requests_total', gen)})", "{{status}}")], "reqps",
        description="429 = queue full (Retry-After sent); 499 = client closed the connection.")
    d.timeseries("Model memory", [
        (f"max by (kind) ({q('switchyard_model_memory_bytes')})", "{{kind}}")], "bytes")
    d.timeseries("Running requests' memory", [
        (f"sum({q('switchyard_request_memory_reserved_bytes')})", "held (+256 tokens of growth each)"),
        (f"max({q('switchyard_request_memory_budget_bytes')})", "budget (--request-memory-bytes)"),
    ], "bytes", description="A request that would take the held bytes over the budget waits for memory; when the "
                            "running ones outgrow it, the newest gives its caches back and waits.")
    d.timeseries("Requests released for memory / s", [
        (f"sum({rate('switchyard_requests_released_total')})", "released"),
    ], "short", description="A released request waits, then prefills its prompt and what it wrote again: a rate "
                            "that stays up says the budget is small for the contexts served at once.")
    d.timeseries("Finish reasons", [
        (f"sum by (reason) ({rate('switchyard_finish_reasons_total')})", "{{reason}}")], "short")
    d.timeseries("Client disconnects / s", [
        (f"sum by (endpoint) ({rate('switchyard_client_disconnects_total')})", "{{endpoint}}")], "short")
    d.panel("table", "Build", [(f"max by (version, python_version, mlx_version, mlx_lm_version) "
                                f"({q('switchyard_build_info')})", "")], instant=True)

    d.row("Prefix cache")
    d.timeseries("Prefix cache hit ratio", [
        (f"sum({rate('switchyard_prefix_cache_hits_total')}) / sum({rate('switchyard_prefix_cache_lookups_total')})"
         " > -1", "hits / lookups")], "percentunit",
        description="Prefills that resumed from a cached prompt prefix (chat and agent turns resend the history).")
    d.timeseries("Cached prompt tokens / s", [
        (f"sum({rate('switchyard_prefix_cache_cached_tokens_total')})", "cached"),
        (f"sum({rate('switchyard_prompt_tokens_total')})", "all prompt tokens")], "short")
    d.timeseries("Prefix cache size", [
        (f"max({q('switchyard_prefix_cache_bytes')})", "held"),
        (f"max({q('switchyard_prefix_cache_max_bytes')})", "limit")], "bytes")
    d.timeseries("Prefix cache evictions / s", [
        (f"sum({rate('switchyard_prefix_cache_evictions_total')})", "evictions")], "short")

    d.row("Policy")
    d.stat("Last reload OK", f"min({q('switchyard_policy_last_reload_ok')})", "bool_yes_no", w=6)
    d.stat("Since last good reload", f"time() - max({q('switchyard_policy_last_reload_success_timestamp_seconds')})",
           "s", w=6)
    failures = q("switchyard_policy_reloads_total", 'result="failure"')
    d.stat("Reload failures (range)", f"sum(increase({failures}[$__range]))", "none", w=6)
    d.stat("Engines enabled", f"sum({q('switchyard_policy_engine_enabled')})", "none", w=6)
    d.timeseries("Policy reloads by result", [
        (f"sum by (result) (increase({q('switchyard_policy_reloads_total')}[{RATE}]))", "{{result}}")], "short", w=12)
    d.panel("table", "Policy in force", [(f"max by (source, exploration, default_class) "
                                         f"({q('switchyard_policy_info')})", "")], instant=True, w=12)

    return {
        "title": "Switchyard",
        "uid": "switchyard-gateway",
        "description": "Switchyard gateway: throughput, latency, speculative acceptance, routing, capacity, policy.",
        "tags": ["switchyard", "llm", "mlx"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "refresh": 1, "options": [], "regex": ""},
            {"name": "instance", "label": "Instance", "type": "query", "datasource": DS,
             "query": {"query": "label_values(switchyard_build_info, instance)", "refId": "instance"},
             "definition": "label_values(switchyard_build_info, instance)", "refresh": 2, "includeAll": True,
             "allValue": ".*", "multi": True, "current": {"text": "All", "value": "$__all"}, "options": [],
             "hide": 0, "sort": 1},
        ]},
        "panels": d.panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
