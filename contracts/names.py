"""The closed sets of names that cross package boundaries (engines, request classes, reasons)."""

from __future__ import annotations

# Decoding engines, in the order the gateway lists them. "raw" is always loaded.
ENGINE_NAMES: tuple[str, ...] = ("raw", "mtp", "ddtree")

# Backend.cycle_mode_stats() keys an engine's sampled cycles `<engine>/sampled` (greedy ones plain).
SAMPLED_SUFFIX = "/sampled"

# Request classes: the kind of reply a request asks for (the classifier's labels, the monitor's keys).
CLASSES: tuple[str, ...] = ("code", "prose", "structured")

# Why the router chose an engine (X-Switchyard-Route-Reason, metrics label).
ROUTE_REASONS: tuple[str, ...] = ("forced", "rule", "monitor", "explore", "fallback", "health", "load")

# OpenAI `response_format.type` values; the structured ones force the class "structured".
RESPONSE_FORMATS: tuple[str, ...] = ("text", "json_object", "json_schema")
STRUCTURED_RESPONSE_FORMATS: frozenset[str] = frozenset({"json_object", "json_schema"})


def forces_structured(response_format: str | None) -> bool:
    return response_format in STRUCTURED_RESPONSE_FORMATS


def forces_tool_call(tool_choice: object) -> bool:
    """OpenAI tool_choice "required" or a named function: the reply must be a call."""
    return tool_choice not in (None, "none", "auto")
