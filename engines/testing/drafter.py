"""Write a tiny DFlash drafter in the z-lab checkpoint format, bound to a generated target."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engines.testing import agree, random_init
from engines.testing.hf_layout import write_safetensors
from engines.testing.spec import DrafterSpec, TargetSpec, drafter_config
from engines.testing.target import VARIANTS

TARGET_SPEC_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "rms_norm_eps", "max_position_embeddings")


def _target_spec(target_dir: Path) -> TargetSpec:
    config = json.loads((target_dir / "config.json").read_text())
    text = config.get("text_config", config)
    rope = text.get("rope_parameters") or {}
    return TargetSpec(**{k: text[k] for k in TARGET_SPEC_FIELDS},
                      rope_theta=rope.get("rope_theta", TargetSpec.rope_theta))


def _mask_token_id(target_dir: Path) -> int:
    from tokenizers import Tokenizer

    from engines.testing.tokenizer import MASK

    token_id = Tokenizer.from_file(str(target_dir / "tokenizer.json")).token_to_id(MASK)
    if token_id is None:
        raise ValueError(f"{target_dir} has no {MASK} token; the drafter needs one")
    return token_id


def write_drafter_checkpoint(
    path: str | Path,
    target_dir: str | Path,
    *,
    seed: int = 0,
    variant: str = "random",
    block_size: int = 4,
    num_layers: int = 1,
    target_layer_ids: tuple[int, ...] = (0, 2),
    dtype: str = "float32",
    knobs: agree.AgreeKnobs | None = None,
    rope_theta: float | None = None,
    rope_scaling: dict | None = None,
    schema: str = "flat",
) -> Path:
    """Write a z-lab-format DFlash drafter for the target in `target_dir`; returns its path.

    Files: config.json (architectures DFlashDraftModel, model_type qwen3, dflash_config; RoPE in the
    `schema` of either z-lab generation, optionally scaled, e.g. YaRN) and
    model.safetensors with fc, hidden_norm, norm and layers.i.* (Qwen3 norms: x·w, ≈ 1); no
    embedding or lm_head: the drafter uses the target's. variant "agree" (with an "agree"
    target) drafts the target's frequent token A at every block position.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    target_dir, path = Path(target_dir), Path(path)
    target = _target_spec(target_dir)
    if any(not 0 <= i < target.num_hidden_layers for i in target_layer_ids):
        raise ValueError(f"target_layer_ids {target_layer_ids} outside the target's {target.num_hidden_layers} layers")
    spec = DrafterSpec(num_hidden_layers=num_layers, block_size=block_size, target_layer_ids=tuple(target_layer_ids),
                       rope_theta=rope_theta, rope_scaling=rope_scaling, schema=schema)
    rng = np.random.default_rng(seed + 7919)  # distinct stream from a target with the same seed
    if variant == "random":
        params = random_init.drafter(rng, target.hidden_size, spec, out_scale=1.0)
    else:
        params = agree.drafter_params(rng, target.hidden_size, spec, knobs or agree.AgreeKnobs())

    path.mkdir(parents=True, exist_ok=True)
    write_safetensors(path, params, dtype)
    config = drafter_config(target, spec, _mask_token_id(target_dir))
    config["torch_dtype"] = dtype
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return path
