"""Shipped prompt sets (code / prose / structured, >= 30 each, written for the benchmark and not
used to train the classifier) and the mixed workload: equal thirds, shuffled with a seed.

`mixed-long` is the mixed workload where every other prompt of each class asks behind a long pasted
context, as coding agents' requests do: a ~6,000-character file of Python's standard library (a different
module per prompt; ~1.5-2.5k tokens), then the same ask. The files ship in `contexts.jsonl` (CPython 3.11's
source, PSF License), so every machine and Python version measures the same prompts."""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass
from pathlib import Path

from contracts.names import CLASSES

WORKLOAD_DIR = Path(__file__).resolve().parent
WORKLOADS: tuple[str, ...] = ("mixed", "mixed-long") + CLASSES
LONG_SUFFIX = "+ctx"        # the id of a prompt behind a pasted context
CONTEXT_CHARS = 6000
CONTEXT_MODULES = ("argparse", "textwrap", "pathlib", "csv", "dataclasses", "fractions", "statistics", "heapq",
                   "calendar", "difflib", "shlex", "string", "configparser", "functools", "bisect", "ipaddress")
CONTEXTS_FILE = WORKLOAD_DIR / "contexts.jsonl"


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


@functools.cache
def pasted_sources() -> dict[str, str]:
    """module -> its shipped first CONTEXT_CHARS characters (contexts.jsonl)."""
    rows = (json.loads(line) for line in CONTEXTS_FILE.read_text(encoding="utf-8").split("\n") if line.strip())
    return {row["module"]: row["text"] for row in rows}


def _pasted(module: str) -> str:
    return f"Here is {module}.py from our codebase:\n```python\n{pasted_sources()[module]}\n```\n\n"


def with_context(prompts: list[Prompt]) -> list[Prompt]:
    """Every other prompt of each class behind a pasted source file (the last message carries it)."""
    out, seen = [], {}
    for prompt in prompts:
        index = seen[prompt.klass] = seen.get(prompt.klass, -1) + 1
        if index % 2 == 0:
            out.append(prompt)
            continue
        module = CONTEXT_MODULES[(len(out) * 7 + index) % len(CONTEXT_MODULES)]
        last = dict(prompt.messages[-1], content=_pasted(module) + prompt.messages[-1]["content"])
        out.append(Prompt(prompt.id + LONG_SUFFIX, prompt.klass, prompt.messages[:-1] + (last,)))
    return out


def load_workload(name: str, per_class: int | None = None, seed: int = 0, held_out: int = 0) -> list[Prompt]:
    """`per_class` keeps the first N of each class (quick runs); mixed = equal thirds shuffled. The last
    `held_out` of each class are never among them (they warm the router: `warm_prompts`)."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; one of {', '.join(WORKLOADS)}")
    if name == "mixed-long":
        return with_context(load_workload("mixed", per_class, seed, held_out))
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
    if name == "mixed-long":
        return with_context(warm_prompts("mixed", count, seed))
    classes = CLASSES if name == "mixed" else (name,)
    sets = [load_class(k)[-count:] if count else [] for k in classes]
    prompts = [p for group in zip(*sets) for p in group]
    random.Random(seed + 1).shuffle(prompts)
    return prompts
