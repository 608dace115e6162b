"""A z-lab DFlash drafter's config.json, both schemas, refusing what would change the math unread.
No MLX: `switchyard inspect` reads drafters with it too."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.errors import ModelLoadError

# RoPE variants drafters use, implemented by mlx-lm's rope_utils.initialize_rope (as for its models)
ROPE_TYPES = ("default", "linear", "yarn")
# keys of rope_parameters / rope_scaling that initialize_rope reads for each variant
_ROPE_KEYS = {
    "default": {"rope_type", "type", "rope_theta"},
    "linear": {"rope_type", "type", "rope_theta", "factor"},
    "yarn": {"rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings", "beta_fast",
             "beta_slow", "mscale", "mscale_all_dim"},
}
# Qwen3.5/3.6's multimodal RoPE layout keys: a text-only drafter applies plain RoPE, so they are inert
_INERT_ROPE_KEYS = {"mrope_section", "mrope_interleaved"}
_DFLASH_KEYS = {"block_size", "target_layer_ids", "mask_token_id"}


@dataclass(frozen=True)
class RopeSettings:
    """The drafter's effective RoPE: what its attention applies at absolute positions."""

    theta: float
    scaling: dict | None = None   # rope_parameters / rope_scaling for a scaled variant; None = default

    @property
    def kind(self) -> str:
        return (self.scaling or {}).get("rope_type") or (self.scaling or {}).get("type") or "default"

    def describe(self) -> str:
        extra = {k: v for k, v in (self.scaling or {}).items() if k not in ("rope_type", "type", "rope_theta")}
        details = ", ".join(f"{k}={v}" for k, v in sorted(extra.items()))
        return f"rope {self.kind} theta={self.theta:g}" + (f" ({details})" if details else "")


def _rope_settings(raw: dict) -> RopeSettings:
    """Both config schemas: top-level `rope_theta` / `rope_scaling` (before June 2026) and nested
    `rope_parameters` (transformers 5, new z-lab drafters). Anything that would change the math
    and is not understood is refused, naming the key."""
    nested = raw.get("rope_parameters") or {}
    top_scaling = raw.get("rope_scaling") or {}
    if not isinstance(nested, dict) or not isinstance(top_scaling, dict):
        raise ModelLoadError("drafter config: rope_parameters / rope_scaling must be objects")
    theta_sources = {k: float(v) for k, v in (("rope_theta", raw.get("rope_theta")),
                                               ("rope_parameters.rope_theta", nested.get("rope_theta"))) if v is not None}
    if len(set(theta_sources.values())) > 1:
        raise ModelLoadError(f"drafter config: conflicting RoPE bases {theta_sources}")
    def shape_of(params: dict) -> dict:  # what a scaling block says beyond the base
        return {k: v for k, v in params.items() if k != "rope_theta" and k not in _INERT_ROPE_KEYS}

    if nested and top_scaling and shape_of(nested) != shape_of(top_scaling):
        raise ModelLoadError("drafter config: rope_parameters and rope_scaling disagree")
    scaling = {k: v for k, v in {**top_scaling, **nested}.items() if k not in _INERT_ROPE_KEYS}
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    if kind not in ROPE_TYPES:
        raise ModelLoadError(f"drafter config: rope type {kind!r} (rope_parameters.rope_type) is not supported; "
                             f"supported: {', '.join(ROPE_TYPES)}")
    unknown = sorted(set(scaling) - _ROPE_KEYS[kind])
    if unknown:
        raise ModelLoadError(f"drafter config: rope_parameters.{unknown[0]} is not understood for rope type "
                             f"{kind!r}; refusing to guess what it changes")
    if kind in ("linear", "yarn") and "factor" not in scaling:
        raise ModelLoadError(f"drafter config: rope type {kind!r} needs rope_parameters.factor")
    partial = raw.get("partial_rotary_factor", nested.get("partial_rotary_factor", 1.0))
    if float(partial) != 1.0:
        raise ModelLoadError(f"drafter config: partial_rotary_factor {partial} is not supported (full-dim RoPE only)")
    theta = next(iter(theta_sources.values()), 1_000_000.0)
    return RopeSettings(theta, None if kind == "default" else scaling)


def _refuse_unknown_math(raw: dict) -> None:
    """Config fields whose other values would change the drafter's arithmetic."""
    if raw.get("attention_bias"):
        raise ModelLoadError("drafter config: attention_bias true is not supported (the drafter has no biases)")
    if raw.get("mlp_bias"):
        raise ModelLoadError("drafter config: mlp_bias true is not supported")
    if raw.get("hidden_act", "silu") != "silu":
        raise ModelLoadError(f"drafter config: hidden_act {raw['hidden_act']!r} is not supported (silu only)")
    dflash = raw.get("dflash_config") or {}
    unknown = sorted(set(dflash) - _DFLASH_KEYS)
    if unknown:
        raise ModelLoadError(f"drafter config: dflash_config.{unknown[0]} is not understood")


@dataclass(frozen=True)
class DrafterConfig:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope: RopeSettings
    max_position_embeddings: int | None
    block_size: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    layer_types: tuple[str, ...]
    sliding_window: int | None

    @classmethod
    def from_dict(cls, raw: dict) -> "DrafterConfig":
        dflash = raw.get("dflash_config", {})
        _refuse_unknown_math(raw)
        try:
            layers = int(raw["num_hidden_layers"])
            heads = int(raw["num_attention_heads"])
            block_sizes = {int(v) for v in (dflash.get("block_size"), raw.get("block_size")) if v is not None}
            if len(block_sizes) > 1:
                raise ModelLoadError(f"drafter config: block_size {raw.get('block_size')} and "
                                     f"dflash_config.block_size {dflash.get('block_size')} disagree")
            return cls(
                hidden_size=int(raw["hidden_size"]),
                num_hidden_layers=layers,
                num_attention_heads=heads,
                num_key_value_heads=int(raw.get("num_key_value_heads", heads)),
                head_dim=int(raw.get("head_dim") or raw["hidden_size"] // heads),
                intermediate_size=int(raw["intermediate_size"]),
                rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
                rope=_rope_settings(raw),
                max_position_embeddings=raw.get("max_position_embeddings"),
                block_size=block_sizes.pop() if block_sizes else 16,
                target_layer_ids=tuple(int(i) for i in dflash.get("target_layer_ids", raw.get("target_layer_ids"))),
                mask_token_id=int(dflash.get("mask_token_id", raw.get("mask_token_id"))),
                layer_types=tuple(raw.get("layer_types") or ["full_attention"] * layers),
                sliding_window=raw.get("sliding_window"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelLoadError(f"drafter config.json lacks a required field or has a bad value: {exc}") from exc
