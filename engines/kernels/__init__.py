"""Fast paths for the verify forward, each behind a pure-ops reference it is tested against.

`fast_paths` is the one switch the engines read: `enabled` (compiled per-layout GDN/attention
pieces, cached index arrays), `cuda_kernel` (the one-launch tree GDN kernel on MLX-CUDA) and
`ops_attention` (matmul attention for multi-query verifies/drafts on MLX-CUDA, kernels/attention.py)
and `chunked_gdn` (the compiled GDN recurrence for all slots at once instead of one tree level at a time)
and `pipelined` (speculative cycles queued one ahead with the verdict on the device, instead of the host
cycle that reads each verdict before the next draft: engines/speculative.py; automatic: on a GPU, where
it keeps the device busy while the host reads, not on the CPU backend, where MLX computes on the host's
own cores and the pipelined cycle's extra work (masks, holes) only costs; on a GPU each engine then
measures both cycles and keeps the cheaper, engines/cycle_modes.py; `SWITCHYARD_PIPELINED=1/0` fixes it).
Benchmarks flip it to measure before/after in one process; tests flip it to compare paths.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator


@dataclass
class FastPaths:
    enabled: bool = True
    cuda_kernel: bool = True
    ops_attention: bool | None = None   # None: automatic (multi-query on MLX-CUDA); tests force it
    chunked_gdn: bool = True
    pipelined: bool | None = None      # None: automatic (pipelined_cycles)


fast_paths = FastPaths()


def forced_pipelined() -> bool | None:
    """The cycle mode fixed by the switch or SWITCHYARD_PIPELINED=1/0; None: automatic."""
    if fast_paths.pipelined is not None:
        return fast_paths.pipelined
    forced = os.environ.get("SWITCHYARD_PIPELINED", "").strip().lower()
    if forced in ("1", "true", "0", "false"):
        return forced in ("1", "true")
    return None


def pipelined_cycles() -> bool:
    """Whether speculative cycles may run pipelined: the forced mode if set, else on a GPU (where
    engines/cycle_modes.py then measures, per engine, which of the two cycles is cheaper)."""
    forced = forced_pipelined()
    if forced is not None:
        return forced
    import mlx.core as mx

    return mx.default_device() == mx.gpu


@contextmanager
def using(enabled: bool = True, cuda_kernel: bool = True, ops_attention: bool | None = None,
          chunked_gdn: bool = True, pipelined: bool | None = None) -> Iterator[FastPaths]:
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
