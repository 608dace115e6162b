"""Tiny checkpoints in the real on-disk formats, generated locally for tests and benchmarks (never imported
at serving time: tests/test_architecture.py checks).

    write_target_checkpoint(path, *, seed, variant, dtype, shards, mtp, norms, nested, spec, knobs)
        a Qwen3.5 text model dir (HF config/weights/tokenizer, `mtp.*` head) that mlx_lm.load reads
    write_drafter_checkpoint(path, target_dir, *, seed, variant, block_size, num_layers,
                             target_layer_ids, dtype, knobs)
        a z-lab-format DFlash drafter bound to that target
    write_demo_family(dir)  -> dir/target + dir/drafter (idempotent)
    build_tokenizer() / write_tokenizer(dir)  the Qwen-style byte-level BPE

Variants: "random" (full-strength random layers, heads disagree) and "agree" (constructed so
the MTP head and the drafter agree often but not always; see engines/testing/agree.py for the
construction and measured numbers). Importing this package does not import MLX.
"""

from engines.testing.agree import AgreeKnobs
from engines.testing.drafter import write_drafter_checkpoint
from engines.testing.family import write_demo_family
from engines.testing.spec import DrafterSpec, TargetSpec
from engines.testing.target import write_target_checkpoint
from engines.testing.tokenizer import MASK, build_tokenizer, write_tokenizer

__all__ = [
    "AgreeKnobs",
    "DrafterSpec",
    "MASK",
    "TargetSpec",
    "build_tokenizer",
    "write_demo_family",
    "write_drafter_checkpoint",
    "write_target_checkpoint",
    "write_tokenizer",
]
