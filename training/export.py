"""Assemble models/switchyard-demo/ from the shards train_family.py wrote.

target/   config.json (model_type qwen3_5, flat, all sizes explicit, mtp_num_hidden_layers 1),
          generation_config.json, tokenizer.json, tokenizer_config.json,
          model.safetensors = target weights in HF layout (model.*, conv1d (C,1,k), zero-centred norms)
                              + the MTP head's mtp.* tensors, bf16
drafter/  config.json (DFlashDraftModel, dflash_config), model.safetensors (z-lab names, bf16)

  switchyard-train export --shards <dir with target-*/mtp-*/drafter-* shards and report.json>
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from engines.checkpoint import is_mtp_tensor

from . import family_config as fc
from .paths import demo_family, demo_tokenizer_dir, path_option
from .train_common import load_shards


def bf16_shards(shard_dir: Path, stem: str) -> dict[str, torch.Tensor]:
    return {k: v.to(torch.bfloat16).contiguous() for k, v in load_shards(shard_dir, stem, fallback=None).items()}


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def export_drafter(shard_dir: Path, drafter_dir: Path, drafter_config: dict) -> None:
    drafter_dir.mkdir(parents=True, exist_ok=True)
    save_file(bf16_shards(shard_dir, "drafter"), str(drafter_dir / "model.safetensors"), metadata={"format": "pt"})
    write_json(drafter_dir / "config.json", drafter_config)


def export(shard_dir: Path, out: Path, tokenizer_dir: Path, mtp_prompt_window: int | None = None,
           drafter_context_window: int | None = None, greedy_tree_temperature: float = 1.0) -> None:
    report = json.loads((shard_dir / "report.json").read_text())
    target_config = report["args"]["target_config"]
    drafter_config = report["args"]["drafter_config"]
    target_dir, drafter_dir = out / "target", out / "drafter"
    target_dir.mkdir(parents=True, exist_ok=True)
    drafter_dir.mkdir(parents=True, exist_ok=True)

    weights = bf16_shards(shard_dir, "target")
    mtp = bf16_shards(shard_dir, "mtp")
    assert all(is_mtp_tensor(k) for k in mtp), "MTP shard must hold mtp.* only"
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
    hints = fc.serving_hints(report["args"], mtp_prompt_window, drafter_context_window, greedy_tree_temperature)
    write_json(out / "serving.json", hints.model_dump())
    n_target = sum(v.numel() for k, v in weights.items() if not is_mtp_tensor(k))
    n_mtp = sum(v.numel() for v in mtp.values())
    print(f"exported target {n_target / 1e6:.2f}M + mtp {n_mtp / 1e6:.2f}M params -> {target_dir}")
    print(f"exported drafter -> {drafter_dir}; serving windows -> {out / 'serving.json'}")


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=Path, required=True)
    path_option(parser, "--out", demo_family(), "the family folder ({target,drafter}/ are written)")
    parser.add_argument("--tokenizer-dir", type=Path, default=demo_tokenizer_dir(),
                        help="tokenizer.json + tokenizer_config.json to ship with the target (default: the "
                             "checkout's demo target; required outside a checkout unless --drafter-only)")
    parser.add_argument("--drafter-only", action="store_true", help="only drafter-* shards (distill.py): replace "
                        "the drafter, keep the target")
    parser.add_argument("--mtp-prompt-window", type=int, default=None, help="tokens of prompt the MTP head "
                        "attends to when served (default: its training sequence length, --mtp-seq)")
    parser.add_argument("--drafter-context-window", type=int, default=None, help="context rows the drafter "
                        "attends to when served, besides its sink (default: its training length, --drafter-seq)")
    parser.add_argument("--greedy-tree-temperature", type=float, default=1.0, help="DDTree scores a greedy "
                        "request's tree paths by the drafter's log-probs at this temperature (measured per drafter)")
    args = parser.parse_args(argv)
    if args.drafter_only:
        report = json.loads((args.shards / "report.json").read_text())
        export_drafter(args.shards, args.out / "drafter", report["args"]["drafter_config"])
        print(f"exported drafter -> {args.out / 'drafter'}")
    elif args.tokenizer_dir is None:
        parser.error("--tokenizer-dir is required outside a checkout")
    else:
        export(args.shards, args.out, args.tokenizer_dir, args.mtp_prompt_window, args.drafter_context_window,
               args.greedy_tree_temperature)


if __name__ == "__main__":
    main()
