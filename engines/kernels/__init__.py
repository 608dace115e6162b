"""Fast paths for the verify forward, each behind a pure-ops reference it is tested against.

`fast_paths` is the one switch the engines read: `enabled` (compiled per-layout GDN/attention
pieces, cached index arrays), `cuda_kernel` (the one-launch tree GDN kernel on MLX-CUDA) and
`ops_attention` (matmul attention for multi-query verifies/drafts on MLX-CUDA, kernels/attention.py)
and `chunked_gdn` (the compiled GDN recurrence for all slots at once instead of one tree level at a time)
and `pipelined` (speculative cycles queued one ahead with the verdict on the device, instead of the host
cycle that reads each verdict before the next draft: engines/speculative.py).
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
    chunked_gdn: bool = True
    pipelined: bool = True


fast_paths = FastPaths()


@contextmanager
def using(enabled: bool = True, cuda_kernel: bool = True, ops_attention: bool | None = None,
          chunked_gdn: bool = True, pipelined: bool = True) -> Iterator[FastPaths]:
    """Temporarily choose the paths (restores the previous choice on exit)."""
    previous = (fast_paths.enabled, fast_paths.cuda_kernel, fast_paths.ops_attention, fast_paths.chunked_gdn,
                fast_paths.pipelined)
    (fast_paths.enabled, fast_paths.cuda_kernel, fast_paths.ops_attention,
     fast_paths.chunked_gdn, fast_paths.pipelined) = enabled, cuda_kernel, ops_attention, chunked_gdn, pipelined
    try:
        yield fast_paths
    finally:
        (fast_paths.enabled, fast_paths.cuda_kernel, fast_paths.ops_attention, fast_paths.chunked_gdn,
         fast_paths.pipelined) = previous
