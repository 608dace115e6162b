"""Write a tiny Qwen3.5 text checkpoint (with MTP head) in the real Hugging Face on-disk format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engines.testing import agree, random_init
from engines.testing.hf_layout import rename_text_prefix, to_hf_storage, write_safetensors
from engines.testing.random_init import Params
from engines.testing.spec import TargetSpec, generation_config, target_config
from engines.testing.tokenizer import ENDOFTEXT, IM_END, SPECIAL_TOKENS, mask_token_id, write_tokenizer

VARIANTS = ("random", "agree")
NORM_CONVENTIONS = ("hf", "shifted")

# Logit scale of the random variant's lm_head: with ~1000 roughly Gaussian logits of std 4 the
# top token typically gets p ≈ 0.35 (p > 0.3 about 2/3 of the time): peaked, but not one-hot.
RANDOM_LOGIT_STD = 4.0


def target_parameters(spec: TargetSpec, *, seed: int, variant: str, special_ids: list[int], a_id: int,
                      mask_id: int, mtp: bool, knobs: agree.AgreeKnobs) -> Params:
    """Effective (MLX-semantics) parameters of the target and its MTP head, HF names."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    rng = np.random.default_rng(seed)
    h = spec.hidden_size
    if variant == "random":
        params = random_init.target_layers(rng, spec, out_scale=1.0)
        params["model.embed_tokens.weight"] = rng.standard_normal((spec.vocab_size, h)).astype(np.float32)
        params["model.norm.weight"] = random_init.norm_weight(rng, h)
        params["lm_head.weight"] = random_init.linear(rng, spec.vocab_size, h, RANDOM_LOGIT_STD)
        if mtp:
            params.update(random_init.mtp_head(rng, spec, out_scale=1.0))
        return params
    geo = agree.build_geometry(rng, spec, knobs, a_id, mask_id, special_ids)
    params = agree.target_params(rng, spec, knobs, geo, special_ids)
    if mtp:
        params.update(agree.mtp_params(rng, spec, knobs, geo, params["model.norm.weight"]))
    return params


def write_target_checkpoint(
    path: str | Path,
    *,
    seed: int = 0,
    variant: str = "random",
    dtype: str = "float32",
    shards: int = 1,
    mtp: bool = True,
    norms: str = "hf",
    nested: bool = False,
    spec: TargetSpec | None = None,
    knobs: agree.AgreeKnobs | None = None,
    chat: str = "plain",
) -> Path:
    """Write a Qwen3.5 text model directory that `mlx_lm.load` reads; returns its path.

    variant: "random" (full-strength random layers; MTP head disagrees with the target) or
        "agree" (bigram-dominated target whose MTP head / DFlash drafter agree often, see agree.py).
    dtype: "float32" | "bfloat16" | "float16" (A_log stays float32, as in real checkpoints).
    shards: 1 → model.safetensors; n > 1 → n files + index, all `mtp.*` in the last shard.
    mtp: include the `mtp.*` head tensors (False mimics mlx-community conversions that strip them).
    norms: "hf" stores every zero-centred norm as w − 1 (real checkpoints); "shifted" stores the
        MTP head's norms already +1 (x·w), to test that the MTP loader does not shift twice.
    nested: write config under `text_config` and weights as `model.language_model.*`, the layout
        of the real multimodal Qwen3.5 uploads (mlx-lm maps both).
    chat: "plain" (ChatML) or "qwen3.6" (the published template: tools, thinking; its tokens added).
    """
    if norms not in NORM_CONVENTIONS:
        raise ValueError(f"norms must be one of {NORM_CONVENTIONS}, got {norms!r}")
    spec = spec or TargetSpec()
    knobs = knobs or agree.AgreeKnobs()
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)

    tokenizer = write_tokenizer(path, vocab_size=spec.vocab_size, chat=chat)
    if tokenizer.get_vocab_size() != spec.vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.get_vocab_size()} tokens, spec wants {spec.vocab_size}")
    special_ids = [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS]
    eos_id, pad_id = tokenizer.token_to_id(IM_END), tokenizer.token_to_id(ENDOFTEXT)
    a_id = tokenizer.token_to_id(knobs.a_token) or 300

    params = target_parameters(spec, seed=seed, variant=variant, special_ids=special_ids, a_id=a_id,
                               mask_id=mask_token_id(tokenizer), mtp=mtp, knobs=knobs)
    stored = to_hf_storage(params, shift_mtp_norms=(norms == "hf"))
    if nested:
        stored = rename_text_prefix(stored, "model.language_model")
    write_safetensors(path, stored, dtype, shards)

    config = target_config(spec, eos_id, nested)
    config["torch_dtype" if not nested else "dtype"] = dtype
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (path / "generation_config.json").write_text(
        json.dumps(generation_config([eos_id, pad_id], pad_id), indent=2) + "\n")
    return path
