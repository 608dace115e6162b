"""Write a generated target + drafter family for benchmarking before the trained demo model lands.

    python -m bench.make_family DIR [--size tiny|demo] [--variant agree|random]

`tiny` is the test-sized family (hidden 64, 4 layers). `demo` has the trained demo target's layer
sizes (training/family_config.py: hidden 384, 8 layers, GDN 4/8 heads x 64, attention 6/2 x 64,
MLP 896; drafter block 8 over target layers 1,3,5,7) with the test tokenizer's 1024-token vocab.
`agree` weights make the MTP head and the drafter agree with the target often (engines/testing/
agree.py), so speculative engines have something to accept; speeds mean what they mean on random
weights: cost per step is real, acceptance is engineered.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engines.testing.drafter import write_drafter_checkpoint
from engines.testing.spec import TargetSpec
from engines.testing.target import write_target_checkpoint

DEMO_SIZED = TargetSpec(vocab_size=1024, hidden_size=384, num_hidden_layers=8, num_attention_heads=6,
                        num_key_value_heads=2, head_dim=64, intermediate_size=896, linear_num_key_heads=4,
                        linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64)


def write_family(directory: Path, size: str = "demo", variant: str = "agree", seed: int = 0) -> Path:
    if size == "demo":
        target = write_target_checkpoint(directory / "target", seed=seed, variant=variant, spec=DEMO_SIZED)
        write_drafter_checkpoint(directory / "drafter", target, seed=seed, variant=variant, block_size=8,
                                 num_layers=2, target_layer_ids=(1, 3, 5, 7))
    else:
        target = write_target_checkpoint(directory / "target", seed=seed, variant=variant)
        write_drafter_checkpoint(directory / "drafter", target, seed=seed, variant=variant)
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--size", choices=("tiny", "demo"), default="demo")
    parser.add_argument("--variant", choices=("agree", "random"), default="agree")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = write_family(args.directory, args.size, args.variant, args.seed)
    print(f"wrote {out / 'target'} and {out / 'drafter'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
