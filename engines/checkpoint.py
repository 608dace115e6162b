"""Reading checkpoint directories without loading a tensor: config.json, safetensors headers, the
MTP head's shards. No MLX: `switchyard inspect` and the loaders share it."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.errors import ModelLoadError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_FAMILY = REPO_ROOT / "models" / "switchyard-demo"
MTP_PREFIX = "mtp."
INDEX_FILE = "model.safetensors.index.json"


def default_model_dir() -> Path:
    """The embedded default model: $SWITCHYARD_MODEL, else the demo family shipped in models/."""
    override = os.environ.get("SWITCHYARD_MODEL")
    if override:
        return Path(override)
    if (DEMO_FAMILY / "target" / "config.json").exists():
        return DEMO_FAMILY / "target"
    raise ModelLoadError(
        f"the embedded demo model is not at {DEMO_FAMILY} (install from a clone of the repository, "
        "which ships it); or pass --model DIR / set SWITCHYARD_MODEL"
    )


def read_config(path: Path) -> dict[str, Any]:
    file = path / "config.json"
    if not path.is_dir():
        raise ModelLoadError(f"model directory not found: {path}")
    if not file.exists():
        raise ModelLoadError(f"{path} has no config.json: not a model directory")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{file} is not valid JSON: {exc}") from exc


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The text-model part of a (possibly multimodal, nested) Qwen3.5 config."""
    return {**config, **config.get("text_config", {})}


def layer_types(config: dict[str, Any]) -> list[str]:
    """Each decoder layer's kind ("linear_attention" = GatedDeltaNet, "full_attention"): the config's
    `layer_types`, else every `full_attention_interval`-th layer (4 by default) is full attention."""
    cfg = text_config(config)
    if cfg.get("layer_types"):
        return list(cfg["layer_types"])
    interval = int(cfg.get("full_attention_interval", 4))
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(int(cfg.get("num_hidden_layers", 0)))]


def layer_counts(config: dict[str, Any]) -> tuple[int, int]:
    """How many GatedDeltaNet layers and how many full-attention layers the model has."""
    kinds = layer_types(config)
    linear = sum(1 for kind in kinds if kind == "linear_attention")
    return linear, len(kinds) - linear


def mtp_layer_count(config: dict) -> int:
    cfg = text_config(config)
    return int(cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers") or 0)


def safetensors_header(file: Path) -> dict[str, dict]:
    """tensor name -> {"dtype", "shape", "data_offsets"} from a .safetensors file's JSON header."""
    with open(file, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
    header.pop("__metadata__", None)
    return header


def mtp_weight_files(directory: Path) -> list[Path]:
    """Only the shards that hold mtp.* tensors (via the index), else every safetensors file."""
    index = directory / INDEX_FILE
    if index.exists():
        weight_map: dict[str, str] = json.loads(index.read_text()).get("weight_map", {})
        shards = sorted({shard for name, shard in weight_map.items() if MTP_PREFIX in name})
        return [directory / shard for shard in shards]
    return sorted(directory.glob("*.safetensors"))


def is_mtp_tensor(name: str) -> bool:
    at = name.find(MTP_PREFIX)
    return at >= 0 and (at == 0 or name[at - 1] == ".")


def mtp_tensor_names(source: Path) -> dict[str, Path]:
    """mtp.* tensor name -> the file holding it, from headers only (a dir, or one sidecar file)."""
    files = [source] if source.is_file() else mtp_weight_files(source)
    return {name: file for file in files for name in safetensors_header(file) if is_mtp_tensor(name)}


def has_mtp_tensors(source: Path) -> bool:
    return bool(mtp_tensor_names(source))


class ServingHints(BaseModel):
    """`<family>/serving.json` beside the target: what the family's heads were trained for. A window
    bounds the context an MTP head (its rows over the prompt) or a DFlash drafter (its context rows)
    attends to; None: all of it. Drafts only propose, so a window never changes the output."""

    model_config = ConfigDict(extra="forbid")

    mtp_prompt_window: int | None = Field(None, ge=1)
    drafter_context_window: int | None = Field(4096, ge=1)
    # DDTree ranks a greedy request's tree paths by the drafter's log-probs at this temperature (< 1
    # sharpens: the drafter is under-confident about the target's argmax); trees only propose
    greedy_tree_temperature: float = Field(1.0, gt=0, le=4)
    why: str = ""


def serving_hints(model_dir: Path) -> ServingHints:
    path = model_dir.parent / "serving.json"
    if not path.exists():
        return ServingHints()
    try:
        return ServingHints.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError) as exc:
        raise ModelLoadError(f"{path} is not a valid serving hints file: {str(exc).splitlines()[0]}") from exc
