"""What one request's caches hold, by the tokens in its context, read off the model's config alone (no
MLX): what the server reserves for a request (`--request-memory-bytes`, engines.runtime) and what
`switchyard inspect` reports before anything is loaded come from this one formula, which the tests hold
to what mlx-lm allocates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .checkpoint import layer_counts

RECURRENCE_BYTES = 4   # mlx-lm keeps the GatedDeltaNet recurrence in float32, whatever the weights' dtype
# the drafter's context K/V is bounded: its first CONTEXT_SINK tokens and the last CONTEXT_WINDOW (DDTreeEngine's
# defaults)
CONTEXT_SINK, CONTEXT_WINDOW = 64, 4096


def kv_bytes_per_token(cfg: dict[str, Any], itemsize: int) -> int:
    """Attention-cache bytes one token of context adds: keys and values of every full-attention layer."""
    heads = int(cfg.get("num_key_value_heads", 1))
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    return 2 * layer_counts(cfg)[1] * heads * head_dim * itemsize


def state_bytes(cfg: dict[str, Any], itemsize: int) -> int:
    """Bytes of one request's GatedDeltaNet state, which does not grow with the context: each linear-attention
    layer's recurrence (value heads x value dim x key dim, float32) and its convolution's last kernel-1 inputs
    (queries, keys and values, in the compute dtype)."""
    linear = layer_counts(cfg)[0]
    value_heads, key_heads = int(cfg.get("linear_num_value_heads", 0)), int(cfg.get("linear_num_key_heads", 0))
    key_dim, value_dim = int(cfg.get("linear_key_head_dim", 0)), int(cfg.get("linear_value_head_dim", 0))
    convolution = (int(cfg.get("linear_conv_kernel_dim", 4)) - 1) * (2 * key_heads * key_dim + value_heads * value_dim)
    return linear * (value_heads * value_dim * key_dim * RECURRENCE_BYTES + convolution * itemsize)


@dataclass(frozen=True)
class DrafterShape:
    """The DFlash drafter's attention: what its context K/V holds per token."""

    layers: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class RequestCost:
    """What one request's caches hold, by the tokens in its context: the target's attention KV (and the MTP
    head's one attention layer, shaped as the target's) per token, the GatedDeltaNet state once, and the
    drafter's context K/V per token up to its sink + window. Activations of a step are not counted."""

    fixed: int
    per_token: int
    drafter_per_token: int = 0
    drafter_rows: int | None = None   # the drafter's context bound (None: the whole context)

    @classmethod
    def of(cls, cfg: dict[str, Any], itemsize: int, *, mtp: bool = False, drafter: DrafterShape | None = None,
           drafter_rows: int | None = CONTEXT_SINK + CONTEXT_WINDOW) -> RequestCost:
        """`cfg`: the target's text config; `itemsize`: bytes of its compute dtype; `mtp`: the MTP head runs;
        `drafter`: the DFlash drafter's attention, when DDTree runs, with its context bound."""
        kv = kv_bytes_per_token(cfg, itemsize)
        per_token = kv + (kv // layer_counts(cfg)[1] if mtp else 0)
        if drafter is None:
            return cls(state_bytes(cfg, itemsize), per_token)
        drafter_kv = 2 * drafter.layers * drafter.kv_heads * drafter.head_dim * itemsize
        return cls(state_bytes(cfg, itemsize), per_token, drafter_kv, drafter_rows)

    def bytes(self, tokens: int) -> int:
        rows = tokens if self.drafter_rows is None else min(tokens, self.drafter_rows)
        return self.fixed + tokens * self.per_token + rows * self.drafter_per_token
