"""`switchyard-train STEP [options]` (the same as `python -m training STEP ...` and as
`python -m training.MODULE ...`): one command for every step of rebuilding the demo family."""

from __future__ import annotations

import importlib
import sys

# step -> the module of this package whose main(argv) runs it; in the order the family is rebuilt
STEPS: dict[str, str] = {
    "corpus": "build_corpus",
    "tokenizer": "train_tokenizer",
    "pack": "data",
    "family": "train_family",
    "distill": "distill",
    "export": "export",
    "acceptance": "acceptance_report",
}


def usage() -> str:
    steps = "\n".join(f"  {step:11s} python -m training.{module}" for step, module in STEPS.items())
    return f"usage: switchyard-train STEP [options]   (STEP --help lists its options)\n\nsteps:\n{steps}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    step, rest = argv[0], argv[1:]
    if step not in STEPS:
        print(f"switchyard-train: unknown step {step!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"training.{STEPS[step]}")
    return int(module.main(rest, prog=f"switchyard-train {step}") or 0)
