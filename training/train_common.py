"""Helpers shared by the training phases: seeding, LR schedule, time-budgeted step counts, shard saving."""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import numpy as np
import torch

MAX_SHARD_BYTES = 14 << 20  # files coming back from the device must stay under 16 MiB


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def lr_at(step: int, total: int, peak: float, warmup: int, floor: float = 0.1) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


class StepBudget:
    """Fixes the total step count after timing the first `probe` steps, so a phase fits its seconds.
    Passing `steps` makes the run exactly reproducible (the log prints the count it chose)."""

    def __init__(self, seconds: float, steps: int | None, probe: int = 8) -> None:
        self.seconds, self.total, self.probe = seconds, steps, probe
        self.start = time.time()
        self.probe_start: float | None = None

    def after_step(self, step: int) -> None:
        if self.total is not None:
            return
        if step == 1:  # the first step pays for allocation and kernel selection
            self.probe_start = time.time()
        elif step == 1 + self.probe and self.probe_start is not None:
            per_step = (time.time() - self.probe_start) / self.probe
            remaining = self.seconds - (time.time() - self.start)
            self.total = step + max(1, int(remaining / per_step))
            print(f"[budget] {per_step * 1000:.1f} ms/step -> {self.total} steps", flush=True)

    def planned(self, fallback: int) -> int:
        return self.total if self.total is not None else fallback

    def done(self, step: int) -> bool:
        return self.total is not None and step >= self.total


def adamw(params: list[torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.AdamW:
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = all(p.is_cuda for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)


def save_shards(tensors: dict[str, torch.Tensor], out_dir: Path, stem: str) -> list[str]:
    """bf16 safetensors shards of at most MAX_SHARD_BYTES each: stem-00.safetensors, ..."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, torch.Tensor]] = [{}]
    used = 0
    for name in sorted(tensors):
        tensor = tensors[name].detach().to(torch.bfloat16).contiguous().cpu()
        size = tensor.numel() * 2
        if used + size > MAX_SHARD_BYTES and shards[-1]:
            shards.append({})
            used = 0
        shards[-1][name] = tensor
        used += size
    names = []
    for index, shard in enumerate(shards):
        name = f"{stem}-{index:02d}.safetensors"
        save_file(shard, str(out_dir / name))
        names.append(name)
    return names
