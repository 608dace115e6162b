"""Random parameters of the tiny models, in *effective* (MLX) semantics.

Norm weights here are what the forward pass multiplies by (≈ 1); `hf_layout` later stores the
zero-centred ones as `w − 1`. Linear weights are (out, in) like HF and MLX. `out_scale` scales the
projections that write into the residual stream (o_proj, out_proj, down_proj): 1 gives
full-strength random layers, small values make a layer a gentle perturbation.
"""

from __future__ import annotations

import numpy as np

from engines.testing.spec import DrafterSpec, TargetSpec

Params = dict[str, np.ndarray]


def linear(rng: np.random.Generator, out_dim: int, in_dim: int, gain: float = 1.0) -> np.ndarray:
    return (rng.standard_normal((out_dim, in_dim)) * (gain / np.sqrt(in_dim))).astype(np.float32)


def norm_weight(rng: np.random.Generator, dim: int, spread: float = 0.05) -> np.ndarray:
    return (1.0 + spread * rng.standard_normal(dim)).astype(np.float32)


def mlp(rng: np.random.Generator, hidden: int, intermediate: int, out_scale: float) -> Params:
    return {
        "mlp.gate_proj.weight": linear(rng, intermediate, hidden),
        "mlp.up_proj.weight": linear(rng, intermediate, hidden),
        "mlp.down_proj.weight": linear(rng, hidden, intermediate, out_scale),
    }


def gated_attention_layer(rng: np.random.Generator, spec: TargetSpec, out_scale: float) -> Params:
    """A Qwen3.5 full-attention decoder layer: q_proj carries [query | output gate] per head."""
    h, nh, nkv, hd = spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    return {
        "input_layernorm.weight": norm_weight(rng, h),
        "post_attention_layernorm.weight": norm_weight(rng, h),
        "self_attn.q_proj.weight": linear(rng, 2 * nh * hd, h),
        "self_attn.k_proj.weight": linear(rng, nkv * hd, h),
        "self_attn.v_proj.weight": linear(rng, nkv * hd, h),
        "self_attn.o_proj.weight": linear(rng, h, nh * hd, out_scale),
        "self_attn.q_norm.weight": norm_weight(rng, hd),
        "self_attn.k_norm.weight": norm_weight(rng, hd),
        **mlp(rng, h, spec.intermediate_size, out_scale),
    }


def gated_delta_layer(rng: np.random.Generator, spec: TargetSpec, out_scale: float) -> Params:
    """A GatedDeltaNet decoder layer with decays spread between long and short memory."""
    h, nv = spec.hidden_size, spec.linear_num_value_heads
    # A in [0.02, 1] and dt ≈ softplus(dt_bias) in [0.01, 0.5] keep per-step decay exp(-A·dt)
    # between ~0.6 and ~1: the recurrent state matters across many positions.
    a_values = np.exp(rng.uniform(np.log(0.02), np.log(1.0), nv))
    dt = np.exp(rng.uniform(np.log(0.01), np.log(0.5), nv))
    return {
        "input_layernorm.weight": norm_weight(rng, h),
        "post_attention_layernorm.weight": norm_weight(rng, h),
        "linear_attn.in_proj_qkv.weight": linear(rng, spec.conv_dim, h),
        "linear_attn.in_proj_z.weight": linear(rng, spec.linear_value_dim, h),
        "linear_attn.in_proj_b.weight": linear(rng, nv, h),
        "linear_attn.in_proj_a.weight": linear(rng, nv, h, 0.5),
        # HF layout (C, 1, k); depthwise, so the MLX (C, k, 1) layout holds the same numbers.
        "linear_attn.conv1d.weight": (rng.standard_normal((spec.conv_dim, 1, spec.linear_conv_kernel_dim))
                                      / np.sqrt(spec.linear_conv_kernel_dim)).astype(np.float32),
        "linear_attn.A_log": np.log(a_values).astype(np.float32),
        "linear_attn.dt_bias": np.log(np.expm1(dt)).astype(np.float32),
        "linear_attn.norm.weight": norm_weight(rng, spec.linear_value_head_dim),
        "linear_attn.out_proj.weight": linear(rng, h, spec.linear_value_dim, out_scale),
        **mlp(rng, h, spec.intermediate_size, out_scale),
    }


def target_layers(rng: np.random.Generator, spec: TargetSpec, out_scale: float) -> Params:
    params: Params = {}
    for i in range(spec.num_hidden_layers):
        make = gated_delta_layer if spec.is_linear(i) else gated_attention_layer
        layer = make(rng, spec, out_scale)
        params.update({f"model.layers.{i}.{k}": v for k, v in layer.items()})
    return params


def mtp_head(rng: np.random.Generator, spec: TargetSpec, out_scale: float) -> Params:
    h = spec.hidden_size
    params: Params = {
        "mtp.fc.weight": linear(rng, h, 2 * h),
        "mtp.pre_fc_norm_embedding.weight": norm_weight(rng, h),
        "mtp.pre_fc_norm_hidden.weight": norm_weight(rng, h),
        "mtp.norm.weight": norm_weight(rng, h),
    }
    for i in range(spec.mtp_num_hidden_layers):
        layer = gated_attention_layer(rng, spec, out_scale)
        params.update({f"mtp.layers.{i}.{k}": v for k, v in layer.items()})
    return params


def drafter_layer(rng: np.random.Generator, hidden: int, spec: DrafterSpec, out_scale: float) -> Params:
    """A Qwen3 decoder layer (plain attention, no output gate), Qwen3 norm convention (x·w)."""
    nh, nkv, hd = spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    return {
        "input_layernorm.weight": norm_weight(rng, hidden),
        "post_attention_layernorm.weight": norm_weight(rng, hidden),
        "self_attn.q_proj.weight": linear(rng, nh * hd, hidden),
        "self_attn.k_proj.weight": linear(rng, nkv * hd, hidden),
        "self_attn.v_proj.weight": linear(rng, nkv * hd, hidden),
        "self_attn.o_proj.weight": linear(rng, hidden, nh * hd, out_scale),
        "self_attn.q_norm.weight": norm_weight(rng, hd),
        "self_attn.k_norm.weight": norm_weight(rng, hd),
        **mlp(rng, hidden, spec.intermediate_size, out_scale),
    }


def drafter(rng: np.random.Generator, hidden: int, spec: DrafterSpec, out_scale: float) -> Params:
    n_captured = len(spec.target_layer_ids)
    params: Params = {
        "fc.weight": linear(rng, hidden, n_captured * hidden),
        "hidden_norm.weight": norm_weight(rng, hidden),
        "norm.weight": norm_weight(rng, hidden),
    }
    for i in range(spec.num_hidden_layers):
        params.update({f"layers.{i}.{k}": v for k, v in drafter_layer(rng, hidden, spec, out_scale).items()})
    return params
