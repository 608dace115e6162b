"""Shipped prompt sets (code / prose / structured, >= 30 each, written for the benchmark and not
used to train the classifier) and the mixed workload: equal thirds, shuffled with a seed."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from contracts.names import CLASSES

WORKLOAD_DIR = Path(__file__).resolve().parent
WORKLOADS: tuple[str, ...] = ("mixed",) + CLASSES


@dataclass(frozen=True)
class Prompt:
    id: str
    klass: str                 # the label the prompt was written for (ground truth, not the classifier's)
    messages: tuple[dict, ...]

    @property
    def text(self) -> str:
        return "\n".join(m["content"] for m in self.messages)


def load_class(klass: str) -> list[Prompt]:
    if klass not in CLASSES:
        raise ValueError(f"unknown prompt class {klass!r}; one of {', '.join(CLASSES)}")
    prompts = []
    for line in (WORKLOAD_DIR / f"{klass}.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            prompts.append(Prompt(id=row["id"], klass=row["class"], messages=tuple(row["messages"])))
    return prompts


def load_workload(name: str, per_class: int | None = None, seed: int = 0, held_out: int = 0) -> list[Prompt]:
    """`per_class` keeps the first N of each class (quick runs); mixed = equal thirds shuffled. The last
    `held_out` of each class are never among them (they warm the router: `warm_prompts`)."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; one of {', '.join(WORKLOADS)}")
    classes = CLASSES if name == "mixed" else (name,)
    sets = [load_class(k) for k in classes]
    size = min(len(s) for s in sets) - held_out
    if size < 1:
        raise ValueError(f"holding out {held_out} prompts per class leaves none to measure")
    if per_class is not None:
        size = min(size, per_class)
    prompts = [p for s in sets for p in s[:size]]
    if name == "mixed":
        random.Random(seed).shuffle(prompts)
    return prompts


def warm_prompts(name: str, count: int, seed: int = 0) -> list[Prompt]:
    """The last `count` prompts of each class of the workload, classes interleaved: traffic that warms
    the router before the measured prompts (which `load_workload(held_out=count)` keeps apart)."""
    classes = CLASSES if name == "mixed" else (name,)
    sets = [load_class(k)[-count:] if count else [] for k in classes]
    prompts = [p for group in zip(*sets) for p in group]
    random.Random(seed + 1).shuffle(prompts)
    return prompts
