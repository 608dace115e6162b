"""Fast paths for the verify forward, each behind a pure-ops reference it is tested against.

`fast_paths` is the one switch the engines read: `enabled` (compiled per-layout GDN/attention
pieces, cached index arrays) and `cuda_kernel` (the one-launch tree GDN kernel on MLX-CUDA).
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


fast_paths = FastPaths()


@contextmanager
def using(enabled: bool = True, cuda_kernel: bool = True) -> Iterator[FastPaths]:
    """Temporarily choose the paths (restores the previous choice on exit)."""
    previous = (fast_paths.enabled, fast_paths.cuda_kernel)
    fast_paths.enabled, fast_paths.cuda_kernel = enabled, cuda_kernel
    try:
        yield fast_paths
    finally:
        fast_paths.enabled, fast_paths.cuda_kernel = previous
