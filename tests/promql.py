"""Small PromQL helpers for the ops tests: Grafana variable substitution and metric-name extraction.

Syntax itself is checked by Prometheus's own parser (promtool / a real server); this only finds
which metric names an expression reads, so they can be checked against a real /metrics scrape.
"""

from __future__ import annotations

import re

GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h", "$instance": ".*",
                "${datasource}": "prometheus"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}


def substitute(expr: str) -> str:
    for name, value in GRAFANA_VARS.items():
        expr = expr.replace(name, value)
    return expr


def metric_names(expr: str) -> set[str]:
    """Identifiers used as metric names: not functions/aggregations (followed by "("), not
    keywords, not label names (inside {...} or by (...)), not numbers or durations."""
    text = _STRING.sub('""', substitute(expr))
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names: set[str] = set()
    for match in _IDENT.finditer(text):
        word = match.group(0)
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or word.lower() in _KEYWORDS:
            continue
        before = text[:match.start()]
        if before and (before[-1].isdigit() or before[-1] == "."):  # e.g. the "e" of 1e-9
            continue
        names.add(word)
    return names
