"""The CUDA tree-GDN kernel against the ops reference (float32; tolerance 1e-5), on the demo and the
0.8B head shapes and several trees (chains, forks, slot order != depth order); then the whole tree
verify forward (demo model, float32) with the kernel vs the reference path. MLX-CUDA only.

    python -m bench.check_gdn_kernel
"""

from __future__ import annotations

import sys

import mlx.core as mx

TREES = [(-1,), (-1, 0), (-1, 0, 1, 2, 3), (-1, 0, 0, 1, 2), (-1, 0, 1, 0, 2, 3, 3), (-1, 0, 0, 0, 1, 4, 2, 1, 7)]
HEAD_SHAPES = [(4, 8, 64, 64), (16, 16, 128, 128), (16, 32, 128, 128)]   # (Hk, Hv, Dk, Dv)


def main() -> int:
    from engines.bundle import load_bundle
    from engines.checkpoint import DEMO_FAMILY
    from engines.gdn import recurrence_reference
    from engines.kernels import gdn_tree_cuda, using
    from engines.prefill import prefill
    from engines.target import forward_tree
    from engines.tree import TreeLayout

    if not gdn_tree_cuda.available():
        print("MLX-CUDA not available: nothing to check")
        return 0
    worst = 0.0
    for shape in HEAD_SHAPES:
        for parents in TREES:
            for seed in range(2):
                error = gdn_tree_cuda.compare_with_reference(*shape, recurrence_reference, parents, seed=seed)
                worst = max(worst, error)
                print(f"kernel vs reference {shape} tree {parents} seed {seed}: max abs err {error:.2e}")
    bundle = load_bundle(DEMO_FAMILY / "target", dtype="float32")
    prompt = list(range(10, 300))
    for parents in TREES[1:]:
        layout = TreeLayout.from_parents(list(parents))
        tokens = mx.array([7 + 3 * i for i in range(layout.size)], dtype=mx.uint32)
        hidden = {}
        for mode, flags in (("reference", (False, False)), ("fast", (True, False)), ("cuda", (True, True))):
            with using(enabled=flags[0], cuda_kernel=flags[1]):
                cache = bundle.make_cache()
                prefill(bundle, cache, prompt, last_alone=True)
                hidden[mode] = forward_tree(bundle, tokens, layout, cache).hidden
        for mode in ("fast", "cuda"):
            error = mx.abs(hidden[mode] - hidden["reference"]).max().item()
            worst = max(worst, error)
            print(f"forward_tree {mode} vs reference, demo fp32, tree {parents}: max abs err {error:.2e}")
    print(f"WORST {worst:.2e} ({'PASS' if worst <= 1e-5 else 'FAIL'} at 1e-5)")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
