"""Fast paths for the verify forward, each behind a pure-ops reference it is tested against.

`fast_paths` is the one switch the engines read: `enabled` (compiled per-layout GDN/attention
pieces, cached index arrays), `cuda_kernel` (the one-launch tree GDN kernel on MLX-CUDA) and
`ops_attention` (matmul attention for multi-query verifies/drafts on MLX-CUDA, kernels/attention.py).
Benchmarks flip it to measure before/after in one process; tests flip it to compare paths.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator


@dataclass
class FastPaths:
    enabled: bool = True
    cuda_kernel: bool = True
    ops_attention: bool | None = None   # None: automatic (multi-query on MLX-CUDA); tests force it


fast_paths = FastPaths()


@contextmanager
def using(enabled: bool = True, cuda_kernel: bool = True, ops_attention: bool | None = None) -> Iterator[FastPaths]:
    """Temporarily choose the paths (restores the previous choice on exit)."""
    previous = (fast_paths.enabled, fast_paths.cuda_kernel, fast_paths.ops_attention)
    fast_paths.enabled, fast_paths.cuda_kernel, fast_paths.ops_attention = enabled, cuda_kernel, ops_attention
    try:
        yield fast_paths
    finally:
        fast_paths.enabled, fast_paths.cuda_kernel, fast_paths.ops_attention = previous
