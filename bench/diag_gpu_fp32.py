"""Where fast and reference verify paths part in float32 on a GPU: fused causal SDPA vs an explicit
boolean mask, and compiled vs plain GDN preparation. Prints max abs differences.

    python -m bench.diag_gpu_fp32
"""

from __future__ import annotations

import mlx.core as mx


def main() -> None:
    mx.random.seed(0)
    for T, S in ((2, 514), (5, 517)):
        q = mx.random.normal((1, 6, T, 64))
        k = mx.random.normal((1, 2, S, 64))
        v = mx.random.normal((1, 2, S, 64))
        causal = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask="causal")
        visible = mx.arange(S)[None] <= (mx.arange(T)[:, None] + S - T)
        explicit = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=visible)
        q64, k64, v64 = (x.astype(mx.float32) for x in (q, k, v))
        scores = (q64 @ mx.repeat(k64, 3, axis=1).swapaxes(-1, -2)) * 0.125
        scores = mx.where(visible, scores, -mx.inf)
        manual = mx.softmax(scores, axis=-1, precise=True) @ mx.repeat(v64, 3, axis=1)
        print(f"T={T}: sdpa causal vs bool mask {mx.abs(causal - explicit).max().item():.2e}; "
              f"causal vs ops {mx.abs(causal - manual).max().item():.2e}; bool vs ops {mx.abs(explicit - manual).max().item():.2e}")
    a = mx.random.normal((64, 384))
    w = mx.random.normal((1024, 384))
    ref = (a.astype(mx.float32) @ w.T)
    with mx.stream(mx.cpu):
        cpu = a @ w.T
    print(f"fp32 matmul GPU vs CPU {mx.abs(ref - cpu).max().item():.2e} (|x|~{mx.abs(cpu).max().item():.1f}; TF32 would be ~1e-2)")


if __name__ == "__main__":
    main()
