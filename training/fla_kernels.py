"""Train on flash-linear-attention's GatedDeltaNet kernels, checked against transformers' reference first.

transformers picks fla's `chunk_gated_delta_rule` when the `fla` package imports (on the H200 the kernel
runs 3.8x the reference's speed and the target trains at 1.8x the tokens per second), but fla 0.6
refuses its backward on Hopper with Triton 3.4-3.7.0: the gated dq/dk/dg kernel is miscompiled at a key block of 64 (fla issue #640), which is exactly the demo's key head dim. A key
head padded with zeros to 128 takes the kernel's BK = 128 path instead, and changes nothing else: the
L2 norm and every q.k product are the same, the padded rows of the state stay zero, and the scale is
passed explicitly (fla's default would be 128 ** -0.5). `install()` swaps the padded call in for
transformers' only after `gradient_check()` finds its outputs and gradients equal to the reference's
on the demo's shapes, and only where autograd records (training steps); evaluation and generation, whose
shapes change from batch to batch, keep the reference, as does everything when the check fails.

    python -m training.fla_kernels family --corpus ... --out $OUT       # = train_family with the kernels
    python -m training.fla_kernels distill --target-shards ... --out $OUT
"""

from __future__ import annotations

import importlib
import sys

import torch
import torch.nn.functional as F

PADDED_KEY_DIM = 128


def _modeling():
    import transformers.models.qwen3_5.modeling_qwen3_5 as modeling

    return modeling


def _reference(wrapped):
    """transformers' own PyTorch function behind its kernel wrapper (the wrapper's fallback)."""
    return getattr(wrapped, "__wrapped__", wrapped)


def reference_chunk():
    """transformers' own PyTorch chunked delta rule."""
    return _reference(_modeling().torch_chunk_gated_delta_rule)


def pad_key_dim(kernel, key_dim: int = PADDED_KEY_DIM):
    """`kernel` (fla's calling convention, with an explicit `scale`) run on key heads zero-padded to
    `key_dim`: the same outputs, state and gradients, through the kernel's other block size."""

    def padded(query, key, value, g=None, beta=None, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, cu_seqlens=None, **_):
        k_dim = key.shape[-1]
        pad = max(0, key_dim - k_dim)
        query, key = F.pad(query, (0, pad)), F.pad(key, (0, pad))
        if initial_state is not None:
            initial_state = F.pad(initial_state, (0, 0, 0, pad))   # [B, HV, K, V]
        out, state = kernel(query, key, value, g=g, beta=beta, scale=k_dim ** -0.5, initial_state=initial_state,
                            output_final_state=output_final_state,
                            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens)
        return out, (state[:, :, :k_dim] if state is not None else None)

    return padded


def fla_chunk():
    """fla's chunked kernel with the #640 guard lifted (callers keep its key block off 64)."""
    import fla.ops.common.chunk_o as chunk_o
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    chunk_o.TRITON_ABOVE_3_7_1 = True
    return chunk_gated_delta_rule


def gradient_check(kernel, shape=(2, 1024, 8, 8, 64, 64), tol: float = 2e-2) -> bool:
    """Outputs and gradients of the padded fla call against the reference on random fp32 inputs (as many
    key as value heads: transformers 5.17 repeats the key heads before the call)."""
    torch.manual_seed(0)
    b, t, hk, hv, dk, dv = shape
    base = [torch.randn(b, t, hk, dk), torch.randn(b, t, hk, dk), torch.randn(b, t, hv, dv),
            -torch.rand(b, t, hv) * 0.5, torch.rand(b, t, hv)]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    probe = torch.randn(b, t, hv, dv, device=device)
    results = []
    for fn in (reference_chunk(), kernel):
        inputs = [x.to(device).requires_grad_() for x in base]
        out, _ = fn(*inputs[:3], g=inputs[3], beta=inputs[4], use_qk_l2norm_in_kernel=True)
        (out.float() * probe).sum().backward()
        results.append([out.detach().float()] + [x.grad.float() for x in inputs])
    ok = True
    for name, ref, got in zip(("out", "dq", "dk", "dv", "dg", "dbeta"), *results):
        rel = ((got - ref).norm() / ref.norm().clamp_min(1e-12)).item()
        ok &= rel < tol
        print(f"[fla] {name:5s} relative error {rel:.2e}", flush=True)
    return ok


def when_training(kernel, fallback):
    """`kernel` where autograd records (the training steps' fixed shapes), `fallback` elsewhere: under fla,
    the evaluation's and the replies' generation's ever-changing shapes spent minutes in the kernels'
    compilation and autotuning (a distillation's first batch of replies did not finish in 190 s)."""

    def chosen(*args, **kwargs):
        return (kernel if torch.is_grad_enabled() else fallback)(*args, **kwargs)

    return chosen


def install() -> bool:
    try:
        kernel = pad_key_dim(fla_chunk())
        ok = gradient_check(kernel)
    except Exception as exc:   # no fla, no GPU, a kernel that fails to build: keep the reference
        print(f"[fla] not used: {type(exc).__name__}: {exc}", flush=True)
        ok = False
    modeling = _modeling()
    reference = reference_chunk()
    modeling.torch_chunk_gated_delta_rule = when_training(kernel, reference) if ok else reference
    # one token at a time: generation only
    modeling.torch_recurrent_gated_delta_rule = _reference(modeling.torch_recurrent_gated_delta_rule)
    print(f"[fla] {'padded fla kernel' if ok else 'reference (gradient check failed)'} in use", flush=True)
    return ok


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    steps = {"family": "train_family", "distill": "distill"}
    if not argv or argv[0] not in steps:
        raise SystemExit(f"usage: {prog or 'python -m training.fla_kernels'} {{family|distill}} ARGS")
    install()
    step = importlib.import_module(f"training.{steps[argv[0]]}")
    step.main(argv[1:], prog=f"{prog or 'training.fla_kernels'} {argv[0]}")


if __name__ == "__main__":
    main()
