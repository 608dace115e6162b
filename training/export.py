"""Assemble models/switchyard-demo/ from the shards train_family.py wrote.

target/   config.json (model_type qwen3_5, flat, all sizes explicit, mtp_num_hidden_layers 1),
          generation_config.json, tokenizer.json, tokenizer_config.json,
          model.safetensors = target weights in HF layout (model.*, conv1d (C,1,k), zero-centred norms)
                              + the MTP head's mtp.* tensors, bf16
drafter/  config.json (DFlashDraftModel, dflash_config), model.safetensors (z-lab names, bf16)

  python training/export.py --shards <dir with target-*/mtp-*/drafter-* shards and report.json>
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import family_config as fc

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "models" / "switchyard-demo"


def load_shards(shard_dir: Path, stem: str) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(shard_dir.glob(f"{stem}-*.safetensors")):
        tensors.update(load_file(str(path)))
    if not tensors:
        raise FileNotFoundError(f"no {stem}-*.safetensors in {shard_dir}")
    return {k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()}


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def export_drafter(shard_dir: Path, drafter_dir: Path, drafter_config: dict) -> None:
    drafter_dir.mkdir(parents=True, exist_ok=True)
    save_file(load_shards(shard_dir, "drafter"), str(drafter_dir / "model.safetensors"), metadata={"format": "pt"})
    write_json(drafter_dir / "config.json", drafter_config)


def export(shard_dir: Path, out: Path, tokenizer_dir: Path) -> None:
    report = json.loads((shard_dir / "report.json").read_text())
    target_config = report["args"]["target_config"]
    drafter_config = report["args"]["drafter_config"]
    target_dir, drafter_dir = out / "target", out / "drafter"
    target_dir.mkdir(parents=True, exist_ok=True)
    drafter_dir.mkdir(parents=True, exist_ok=True)

    weights = load_shards(shard_dir, "target")
    mtp = load_shards(shard_dir, "mtp")
    assert all(k.startswith("mtp.") for k in mtp), "MTP shard must hold mtp.* only"
    weights.update(mtp)
    save_file(weights, str(target_dir / "model.safetensors"), metadata={"format": "pt"})
    config = fc.exported_target_config()
    config.update({k: v for k, v in target_config.items() if k in config})
    config["layer_types"] = fc.layer_types(config)
    write_json(target_dir / "config.json", config)
    write_json(target_dir / "generation_config.json", fc.GENERATION_CONFIG)
    if tokenizer_dir.resolve() != target_dir.resolve():
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tokenizer_dir / name, target_dir / name)

    export_drafter(shard_dir, drafter_dir, drafter_config)
    n_target = sum(v.numel() for k, v in weights.items() if not k.startswith("mtp."))
    n_mtp = sum(v.numel() for v in mtp.values())
    print(f"exported target {n_target / 1e6:.2f}M + mtp {n_mtp / 1e6:.2f}M params -> {target_dir}")
    print(f"exported drafter -> {drafter_dir}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tokenizer-dir", type=Path, default=DEFAULT_OUT / "target")
    parser.add_argument("--drafter-only", action="store_true", help="only drafter-* shards (distill.py): replace "
                        "the drafter, keep the target")
    args = parser.parse_args()
    if args.drafter_only:
        report = json.loads((args.shards / "report.json").read_text())
        export_drafter(args.shards, args.out / "drafter", report["args"]["drafter_config"])
        print(f"exported drafter -> {args.out / 'drafter'}")
    else:
        export(args.shards, args.out, args.tokenizer_dir)


if __name__ == "__main__":
    main()
