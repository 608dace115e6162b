"""What every training phase shares: device setup, seeding, the LR schedule, time-budgeted step
counts, THE step loop (optimizer step, grad clipping, LR schedule, logging), shard saving and loading,
and the run's report.json."""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

MAX_SHARD_BYTES = 14 << 20  # files coming back from the device must stay under 16 MiB
GRAD_CLIP = 1.0


def setup_device(out: Path) -> str:
    """cuda if there is one, else cpu; TF32 matmuls; the output folder made; a setup line printed."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    out.mkdir(parents=True, exist_ok=True)
    print(f"[setup] torch {torch.__version__} device {device} "
          f"{torch.cuda.get_device_name() if device == 'cuda' else ''}", flush=True)
    return device


def autocast(device: str):
    return torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=torch.bfloat16)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def freeze(module: torch.nn.Module) -> torch.nn.Module:
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def lr_at(step: int, total: int, peak: float, warmup: int, floor: float = 0.1) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


STOP_AT_ENV = "SWITCHYARD_TRAIN_STOP_AT"


def stop_at() -> float | None:
    """The wall-clock time (epoch seconds, from SWITCHYARD_TRAIN_STOP_AT) by which every timed phase must have
    stopped, so the shards are saved before a device call's timeout. Start-up before a phase (the fla kernels'
    gradient check, their first compilation: 100-340 s on the device) is not known in advance, and a phase
    sized by its own seconds alone lost a target to the timeout twice."""
    value = os.environ.get(STOP_AT_ENV)
    return float(value) if value else None


class StepBudget:
    """Fixes the total step count after timing the first `probe` steps, so a phase fits its seconds (and
    ends by `stop_at()` when that is set). Passing `steps` makes the run exactly reproducible (the log
    prints the count it chose)."""

    def __init__(self, seconds: float, steps: int | None, probe: int = 8, overrun: float = 1.2) -> None:
        self.seconds, self.total, self.probe = seconds, steps, probe
        self.start = time.time()
        self.probe_start: float | None = None
        self.stop_at = None if steps is not None else stop_at()
        # The probe assumes the device stays as busy as it was: a job that shares the GPU and changes phase
        # (replies' generation, then training) slowed a target 3x after its probe and a device call's timeout
        # lost it. A timed phase therefore also stops at `overrun` times its seconds.
        self.deadline = None if steps is not None else self.start + seconds * overrun
        if self.stop_at is not None:
            self.deadline = min(self.deadline, self.stop_at)

    def after_step(self, step: int) -> None:
        if self.total is not None:
            return
        if step == 1:  # the first step pays for allocation and kernel selection
            self.probe_start = time.time()
        elif step == 1 + self.probe and self.probe_start is not None:
            now = time.time()
            per_step = (now - self.probe_start) / self.probe
            remaining = self.seconds - (now - self.start)
            if self.stop_at is not None and self.stop_at - now < remaining:
                remaining = self.stop_at - now
                print(f"[budget] {remaining:.0f} s left before {STOP_AT_ENV}", flush=True)
            self.total = step + max(1, int(remaining / per_step))
            print(f"[budget] {per_step * 1000:.1f} ms/step -> {self.total} steps", flush=True)

    def planned(self, fallback: int) -> int:
        return self.total if self.total is not None else fallback

    def done(self, step: int) -> bool:
        if self.deadline is not None and time.time() > self.deadline and (self.total is None or step < self.total):
            # the phase ends here: later calls (the loop's test, its last log line) read the step count
            print(f"[budget] stopped at step {step} of {self.total}: past {self.deadline - self.start:.0f} s",
                  flush=True)
            self.total = step
        return self.total is not None and step >= self.total


def adamw(params: list[torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.AdamW:
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = all(p.is_cuda for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)


@dataclass
class StepOutput:
    """What a phase's step function returns: the loss to minimise, the tokens it trained on, and
    metrics for the log line (tensors are read only when a line is printed)."""

    loss: torch.Tensor
    tokens: int
    metrics: dict[str, torch.Tensor | float] = field(default_factory=dict)


@dataclass
class Phase:
    """One trained module's schedule: AdamW (betas 0.9/0.95, decay on matrices), linear warm-up then
    cosine to 10 % of `lr`, grad-norm clip 1.0, `seconds` of steps (or exactly `steps`)."""

    name: str
    lr: float
    weight_decay: float
    warmup: int
    seconds: float
    steps: int | None
    log_every: int
    loss_name: str = "loss"


def train_loop(phase: Phase, params: Iterable[torch.nn.Parameter], step_fn: Callable[[], StepOutput]) -> dict:
    """THE step loop of every phase (train_family's target, MTP head and drafter; distill's drafter):
    set the LR, run `step_fn` (it draws its batch and returns its loss), backward, clip, optimizer step,
    log every `log_every` steps and at the end. Returns the phase's report entry."""
    params = list({id(p): p for p in params if p.requires_grad}.values())
    n_params = sum(p.numel() for p in params)
    print(f"[{phase.name}] {n_params / 1e6:.2f}M parameters", flush=True)
    optimizer = adamw(params, phase.lr, weight_decay=phase.weight_decay)
    budget = StepBudget(phase.seconds, phase.steps)
    step, tokens, start = 0, 0, time.time()
    while not budget.done(step):
        lr = lr_at(step, budget.planned(10**9), phase.lr, phase.warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr
        out = step_fn()
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        optimizer.step()
        step += 1
        tokens += out.tokens
        budget.after_step(step)
        if step % phase.log_every == 0 or budget.done(step):
            elapsed = time.time() - start
            metrics = "".join(f" {name} {float(value):.3f}" for name, value in out.metrics.items())
            print(f"[{phase.name}] step {step}/{budget.planned(-1)} {phase.loss_name} {out.loss.item():.4f}{metrics} "
                  f"gnorm {grad_norm.item():.2f} lr {lr:.2e} {tokens / max(elapsed, 1e-9) / 1e3:.0f}k tok/s "
                  f"{elapsed:.0f}s", flush=True)
    return {"steps": step, "tokens": tokens, "seconds": round(time.time() - start, 1), "parameters": n_params,
            "final_loss": round(out.loss.item(), 4) if step else None}


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


def load_shards(directory: Path, stem: str, fallback: str | None = "model.safetensors") -> dict[str, torch.Tensor]:
    """Every tensor of `stem`-*.safetensors in `directory` (training shards), else of `fallback` (an
    exported HF-layout folder); raises if there is neither."""
    from safetensors.torch import load_file

    paths = sorted(directory.glob(f"{stem}-*.safetensors"))
    if not paths and fallback is not None and (directory / fallback).exists():
        paths = [directory / fallback]
    if not paths:
        raise FileNotFoundError(f"no {stem}-*.safetensors{' or ' + fallback if fallback else ''} in {directory}")
    tensors: dict[str, torch.Tensor] = {}
    for path in paths:
        tensors.update(load_file(str(path)))
    return tensors


class RunReport:
    """report.json of a run in `out`: the arguments, each phase's entry, the shards written. Every
    save rewrites it, so a run cut short still says what it left."""

    def __init__(self, out: Path, args, **entries) -> None:
        self.out = out
        self.data: dict = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                           **entries, "files": []}

    def __getitem__(self, key: str):
        return self.data[key]

    def __setitem__(self, key: str, value) -> None:
        self.data[key] = value

    def save(self, stem: str, tensors: dict[str, torch.Tensor]) -> None:
        self.data["files"] += save_shards(tensors, self.out, stem)
        self.write()

    def write(self) -> None:
        (self.out / "report.json").write_text(json.dumps(self.data, indent=1))
