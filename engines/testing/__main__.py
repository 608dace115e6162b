"""`python -m engines.testing DIR [--variant agree|random] [--seed N] [--dtype ...] [--shards N]`

Writes DIR/target and DIR/drafter (a tiny Qwen3.5 target with MTP head and a DFlash drafter).
`python -m engines.testing.measure TARGET [DRAFTER]` then prints how they behave.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engines.testing.drafter import write_drafter_checkpoint
from engines.testing.hf_layout import DTYPES
from engines.testing.target import VARIANTS, write_target_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engines.testing", description=__doc__.splitlines()[2])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--variant", choices=VARIANTS, default="agree")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--shards", type=int, default=1)
    args = parser.parse_args(argv)
    target = write_target_checkpoint(args.directory / "target", seed=args.seed, variant=args.variant,
                                     dtype=args.dtype, shards=args.shards)
    drafter = write_drafter_checkpoint(args.directory / "drafter", target, seed=args.seed, variant=args.variant,
                                       dtype=args.dtype)
    print(f"target:  {target}\ndrafter: {drafter}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
