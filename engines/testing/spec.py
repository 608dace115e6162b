"""Sizes of the tiny test models and the config.json / generation_config.json they are written with.

Every size field is written explicitly: mlx-lm's defaults for qwen3_5 are 27B-sized.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TargetSpec:
    """A tiny Qwen3.5 text model: GatedDeltaNet layers with full attention every `full_attention_interval`."""

    vocab_size: int = 1024
    hidden_size: int = 64
    num_hidden_layers: int = 4
    full_attention_interval: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 4
    linear_key_head_dim: int = 16
    linear_value_head_dim: int = 16
    linear_conv_kernel_dim: int = 4
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25
    max_position_embeddings: int = 4096
    mtp_num_hidden_layers: int = 1

    def is_linear(self, layer: int) -> bool:
        return (layer + 1) % self.full_attention_interval != 0

    @property
    def layer_types(self) -> list[str]:
        return ["linear_attention" if self.is_linear(i) else "full_attention" for i in range(self.num_hidden_layers)]

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.linear_key_dim + self.linear_value_dim

    @property
    def rotary_dims(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)


@dataclass(frozen=True)
class DrafterSpec:
    """A z-lab DFlash drafter: Qwen3-style layers on the target's hidden size."""

    num_hidden_layers: int = 1
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    block_size: int = 4
    target_layer_ids: tuple[int, ...] = (0, 2)
    rope_theta: float | None = None          # None: the target's
    rope_scaling: dict | None = None         # e.g. {"rope_type": "yarn", "factor": 4.0, ...}
    schema: str = "flat"                     # "flat" (top-level rope_theta, block_size) or "nested" (2026:
                                             # rope_parameters, block_size only in dflash_config)


def target_text_config(spec: TargetSpec, eos_token_id: int) -> dict:
    return {
        "model_type": "qwen3_5",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "rms_norm_eps": spec.rms_norm_eps,
        "max_position_embeddings": spec.max_position_embeddings,
        "linear_num_key_heads": spec.linear_num_key_heads,
        "linear_num_value_heads": spec.linear_num_value_heads,
        "linear_key_head_dim": spec.linear_key_head_dim,
        "linear_value_head_dim": spec.linear_value_head_dim,
        "linear_conv_kernel_dim": spec.linear_conv_kernel_dim,
        "full_attention_interval": spec.full_attention_interval,
        "layer_types": spec.layer_types,
        "hidden_act": "silu",
        "attention_bias": False,
        "attn_output_gate": True,
        "tie_word_embeddings": False,
        "mtp_num_hidden_layers": spec.mtp_num_hidden_layers,
        "mtp_use_dedicated_embeddings": False,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": spec.rope_theta,
            "partial_rotary_factor": spec.partial_rotary_factor,
        },
        "eos_token_id": eos_token_id,
    }


def target_config(spec: TargetSpec, eos_token_id: int, nested: bool) -> dict:
    """Flat (what our tests mostly use) or nested under `text_config` (what real Qwen3.5 ships)."""
    text = target_text_config(spec, eos_token_id)
    if not nested:
        return {"architectures": ["Qwen3_5ForCausalLM"], **text, "torch_dtype": "float32"}
    text["model_type"] = "qwen3_5_text"
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text,
        "tie_word_embeddings": False,
        "eos_token_id": eos_token_id,
    }


def generation_config(eos_token_ids: list[int], pad_token_id: int) -> dict:
    return {
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "eos_token_id": eos_token_ids,
        "pad_token_id": pad_token_id,
    }


def drafter_config(target: TargetSpec, drafter: DrafterSpec, mask_token_id: int) -> dict:
    if drafter.schema not in ("flat", "nested"):
        raise ValueError(f"schema must be 'flat' or 'nested', got {drafter.schema!r}")
    theta = drafter.rope_theta if drafter.rope_theta is not None else target.rope_theta
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": target.hidden_size,
        "intermediate_size": drafter.intermediate_size,
        "num_hidden_layers": drafter.num_hidden_layers,
        "num_attention_heads": drafter.num_attention_heads,
        "num_key_value_heads": drafter.num_key_value_heads,
        "head_dim": drafter.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": target.rms_norm_eps,
        "max_position_embeddings": target.max_position_embeddings,
        "vocab_size": target.vocab_size,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "num_target_layers": target.num_hidden_layers,
        "layer_types": ["full_attention"] * drafter.num_hidden_layers,
        "dflash_config": {
            "block_size": drafter.block_size,
            "target_layer_ids": list(drafter.target_layer_ids),
            "mask_token_id": mask_token_id,
        },
        "torch_dtype": "float32",
    }
    if drafter.schema == "flat":  # the layout of the z-lab releases before June 2026
        config["rope_theta"] = theta
        config["block_size"] = drafter.block_size
        if drafter.rope_scaling:
            config["rope_scaling"] = dict(drafter.rope_scaling)
    else:                         # transformers 5 / June 2026: everything RoPE under rope_parameters
        config["rope_parameters"] = {"rope_type": "default", **(drafter.rope_scaling or {}), "rope_theta": theta}
    return config
