"""`switchyard inspect --model DIR [--mtp-weights P] [--draft D]`: what a checkpoint holds and what
serving it will take, read from configs and safetensors headers before anything is loaded."""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("inspect", help="what a model directory holds (MTP head, drafter, memory) before serving it")
    p.add_argument("--model", metavar="DIR", default=None, help="model directory (default: the embedded default model)")
    p.add_argument("--mtp-weights", metavar="PATH", default=None, help="checkpoint dir or .safetensors with mtp.*")
    p.add_argument("--draft", metavar="DIR", default=None, help="DFlash drafter directory (default: ../drafter)")
    p.add_argument("--context", type=int, default=32768, metavar="N", help="tokens of context for the cache estimate")
    p.add_argument("--cpu", action="store_true", help="estimate for the CPU (half-precision weights run as float32)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=inspect_command)


def inspect_command(args: argparse.Namespace) -> int:
    from contracts.errors import ModelLoadError
    from engines.checkpoint import default_model_dir
    from engines.checkpoint_info import inspect_checkpoint

    try:
        model = args.model or default_model_dir()
        info = inspect_checkpoint(model, args.mtp_weights, args.draft, context=args.context, cpu=args.cpu)
    except (ModelLoadError, OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(info.to_json(), indent=1) if args.json else "\n".join(info.lines()))
    return 0
