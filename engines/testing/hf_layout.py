"""Store effective parameters the way real Hugging Face Qwen3.5 checkpoints do, and write safetensors.

HF Qwen3.5 keeps most RMSNorm weights zero-centred (the forward computes x·(1+w)); mlx-lm's
sanitize adds 1 to exactly the keys in ZERO_CENTRED_SUFFIXES when it sees an HF-layout conv1d.
The GatedDeltaNet gated norm (`linear_attn.norm.weight`) is stored as-is (x·w) in HF too.
The MTP head's norms (`mtp.*norm*`) are zero-centred as well; mlx-lm drops them, so the MTP
loader has to shift them itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engines.testing.random_init import Params

# The suffixes mlx-lm's qwen3_5 sanitize shifts by +1.
ZERO_CENTRED_SUFFIXES: tuple[str, ...] = (
    ".input_layernorm.weight",
    ".post_attention_layernorm.weight",
    "model.norm.weight",
    ".q_norm.weight",
    ".k_norm.weight",
)
MTP_ZERO_CENTRED_SUFFIXES: tuple[str, ...] = (
    "mtp.pre_fc_norm_embedding.weight",
    "mtp.pre_fc_norm_hidden.weight",
    "mtp.norm.weight",
)

DTYPES = ("float32", "bfloat16", "float16")


def is_zero_centred(name: str) -> bool:
    return name in MTP_ZERO_CENTRED_SUFFIXES or any(name.endswith(s) for s in ZERO_CENTRED_SUFFIXES)


def to_hf_storage(params: Params, shift_mtp_norms: bool = True) -> Params:
    """Effective → stored: subtract 1 from zero-centred norms. `shift_mtp_norms=False` leaves the
    MTP head's norms already shifted (x·w), as some conversions ship them."""
    stored: Params = {}
    for name, value in params.items():
        centred = is_zero_centred(name) and (shift_mtp_norms or not name.startswith("mtp."))
        stored[name] = (value - 1.0).astype(np.float32) if centred else value
    return stored


def rename_text_prefix(params: Params, prefix: str) -> Params:
    """`model.` → e.g. `model.language_model.` (the nested layout of real multimodal checkpoints)."""
    if prefix == "model":
        return dict(params)
    return {(prefix + name[len("model"):] if name.startswith("model.") else name): v for name, v in params.items()}


def _save(path: Path, tensors: Params, dtype: str) -> None:
    import mlx.core as mx  # lazily: writing checkpoints must not force MLX on importers of this package

    target = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}[dtype]
    arrays = {}
    for name in sorted(tensors):
        value = mx.array(tensors[name])
        # Real checkpoints keep the GDN decay parameter in float32; mlx-lm never casts it.
        arrays[name] = value if name.endswith("A_log") else value.astype(target)
    mx.save_safetensors(str(path), arrays, metadata={"format": "pt"})


def _nbytes(value: np.ndarray, dtype: str) -> int:
    return value.size * (4 if dtype == "float32" else 2)


def write_safetensors(directory: Path, tensors: Params, dtype: str, shards: int = 1) -> list[str]:
    """Write `model.safetensors`, or `shards` files plus `model.safetensors.index.json`.

    With shards, every `mtp.*` tensor goes to the LAST shard (as in the real Qwen3.5 uploads), so a
    loader can read the head from one file; the other tensors fill the shards in name order.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if shards < 1:
        raise ValueError("shards must be >= 1")
    for stale in [*directory.glob("model*.safetensors"), directory / "model.safetensors.index.json"]:
        stale.unlink(missing_ok=True)  # rewriting a directory must not leave another layout's files
    if shards == 1:
        _save(directory / "model.safetensors", tensors, dtype)
        return ["model.safetensors"]

    names = ["model-%05d-of-%05d.safetensors" % (i + 1, shards) for i in range(shards)]
    body = sorted(n for n in tensors if not n.startswith("mtp."))
    head = sorted(n for n in tensors if n.startswith("mtp."))
    per_shard = -(-len(body) // shards)
    groups = [body[i * per_shard:(i + 1) * per_shard] for i in range(shards)]
    groups[-1] = groups[-1] + head
    weight_map: dict[str, str] = {}
    total = 0
    for file_name, group in zip(names, groups):
        _save(directory / file_name, {n: tensors[n] for n in group}, dtype)
        for n in group:
            weight_map[n] = file_name
            total += _nbytes(tensors[n], "float32" if n.endswith("A_log") else dtype)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return names
