"""The device's memory as a server sees it: the wired limit on Metal, and the room left for caches (Metal's
working set, a CUDA device's free memory)."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.utils import maybe_set_recommended_wired_limit


def recommended_working_set() -> int | None:
    """The most a GPU keeps without slowing down (Metal's recommendedMaxWorkingSetSize; None: the device
    reports none, as the CPU and CUDA do)."""
    size = mx.device_info().get("max_recommended_working_set_size")
    return int(size) if size is not None else None


def wire_recommended() -> int | None:
    """On Metal, let MLX keep up to the recommended working set wired (resident), as mlx-lm's generate and
    server do: otherwise macOS may page a large model's buffers out between steps. Set once, before any
    generation (MLX must not change it during an evaluation). Returns the limit (None: nothing to set)."""
    size = recommended_working_set()
    if size is not None:
        maybe_set_recommended_wired_limit()
    return size


def free_bytes() -> int | None:
    """What the device can still take for caches: on Metal its recommended working set less what MLX holds
    now (the weights); on CUDA the free memory the device reports (the weights already out of it). None where
    the device reports neither (the CPU): the host's free memory is the measure there."""
    info = mx.device_info()
    if info.get("free_memory") is not None:
        return int(info["free_memory"])
    size = recommended_working_set()
    return None if size is None else max(0, size - int(mx.get_active_memory()))
