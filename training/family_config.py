"""Sizes of the switchyard-demo family, and the exported config.json dicts built from them.

One place for every number the training scripts, the exporter and the tests agree on. What the
engines also read (special tokens, layer kinds, the drafter's config schema) comes from engines/'
MLX-free modules, not from copies here.
"""

from __future__ import annotations

import copy

from engines.checkpoint import ServingHints
from engines.checkpoint import layer_types as checkpoint_layer_types
from engines.qwen_tokenizer import ENDOFTEXT, IM_END, IM_START, MASK, SPECIAL_TOKENS

VOCAB_SIZE = 8192
# the specials sit after the learned vocabulary, in engines.qwen_tokenizer's order (as in Qwen)
SPECIAL_TOKEN_IDS: dict[str, int] = {token: VOCAB_SIZE - len(SPECIAL_TOKENS) + i
                                     for i, token in enumerate(SPECIAL_TOKENS)}
EOT_ID, IM_START_ID, IM_END_ID, MASK_ID = (SPECIAL_TOKEN_IDS[t] for t in (ENDOFTEXT, IM_START, IM_END, MASK))

# Target: Qwen3.5 hybrid. Layers 3 and 7 are gated full attention (full_attention_interval 4), the
# rest GatedDeltaNet. Partial RoPE: 0.25 of head_dim 64 = 16 rotary dims.
TARGET = {
    "model_type": "qwen3_5",
    "architectures": ["Qwen3_5ForCausalLM"],
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 384,
    "intermediate_size": 896,
    "num_hidden_layers": 8,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "linear_num_key_heads": 4,
    "linear_num_value_heads": 8,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [3, 3, 2],
        "mrope_interleaved": True,
    },
    "mtp_num_hidden_layers": 1,
    "mtp_use_dedicated_embeddings": False,
    "bos_token_id": None,
    "eos_token_id": IM_END_ID,
    "pad_token_id": EOT_ID,
    "torch_dtype": "bfloat16",
}

# DFlash drafter (z-lab format): Qwen3-style layers, plain RMSNorm (x*w), full RoPE, no embedding
# or lm_head of its own. Captures the residual-stream outputs of target layers 1, 3, 5, 7.
DRAFTER = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 384,
    "intermediate_size": 896,
    "num_hidden_layers": 2,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "max_position_embeddings": 8192,
    "attention_bias": False,
    "tie_word_embeddings": False,
    "num_target_layers": TARGET["num_hidden_layers"],
    "layer_types": ["full_attention", "full_attention"],
    "dflash_config": {"block_size": 8, "target_layer_ids": [1, 3, 5, 7], "mask_token_id": MASK_ID},
    "torch_dtype": "bfloat16",
}

GENERATION_CONFIG = {
    "bos_token_id": None,
    "eos_token_id": [IM_END_ID, EOT_ID],
    "pad_token_id": EOT_ID,
    "do_sample": True,
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 40,
}


def layer_types(config: dict) -> list[str]:
    """Every full_attention_interval-th layer full attention, the others GatedDeltaNet (as the engines
    read a config without explicit layer_types: engines.checkpoint.layer_types)."""
    return checkpoint_layer_types({k: v for k, v in config.items() if k != "layer_types"})


def hf_text_config_kwargs(config: dict = TARGET) -> dict:
    """Keyword arguments for transformers' Qwen3_5TextConfig (training side)."""
    kwargs = copy.deepcopy(config)
    for key in ("model_type", "architectures", "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings",
                "full_attention_interval", "torch_dtype"):
        kwargs.pop(key, None)
    kwargs["layer_types"] = layer_types(config)
    return kwargs


def exported_target_config() -> dict:
    """config.json of the shipped target: flat model_type qwen3_5, every size explicit."""
    config = copy.deepcopy(TARGET)
    config["layer_types"] = layer_types(TARGET)
    return config


def serving_hints(train_args: dict, mtp_prompt_window: int | None = None,
                  drafter_context_window: int | None = None, greedy_tree_temperature: float = 1.0) -> ServingHints:
    """`serving.json` for an exported family: each head attends to as much context as it was trained
    on (the MTP head's --mtp-seq, the drafter's --drafter-seq) unless a measured window is given; a
    head reading positions it never learned drafts worse (BENCHMARKS.md, long contexts)."""
    mtp = mtp_prompt_window or int(train_args["mtp_seq"])
    drafter = drafter_context_window or int(train_args["drafter_seq"])
    why = (f"The MTP head was trained on {train_args['mtp_seq']}-token sequences and the drafter on "
           f"{train_args['drafter_seq']}-token windows; serving windows: MTP head {mtp}, drafter {drafter}"
           + (" (measured, passed to export)" if mtp_prompt_window or drafter_context_window else "") + ".")
    return ServingHints(mtp_prompt_window=mtp, drafter_context_window=drafter,
                        greedy_tree_temperature=greedy_tree_temperature, why=why)
