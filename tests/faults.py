"""Fault injection for tests: wrap one engine of a loaded Runtime so it raises mid-request.

The injection point is the runtime's engine table (Runtime.engines), the same object production
code dispatches through: no test-only branch exists in the serving path.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator, Sequence

from contracts.engine import CancelToken, StepResult
from contracts.sampling import SamplingParams


class InjectedFault(RuntimeError):
    """What a FaultyEngine raises (a plain bug as far as the runtime can tell)."""


class FaultyEngine:
    """Delegates to `inner`; while armed, raises InjectedFault after `after_steps` steps of a request."""

    def __init__(self, inner: Any, after_steps: int = 2):
        self.inner = inner
        self.name = getattr(inner, "name", "faulty")
        self.after_steps = after_steps
        self.armed = threading.Event()
        self.armed.set()
        self.faults = 0

    def __getattr__(self, name: str) -> Any:   # head, drafter, ... as the runtime expects
        return getattr(self.inner, name)

    def generate(self, prompt_ids: Sequence[int], params: SamplingParams, cancel: CancelToken,
                 **extra: Any) -> Iterator[StepResult]:
        for index, step in enumerate(self.inner.generate(prompt_ids, params, cancel, **extra)):
            if self.armed.is_set() and index >= self.after_steps:
                self.faults += 1
                raise InjectedFault(f"injected fault after {index} steps")
            yield step


def inject(runtime: Any, engine: str, after_steps: int = 2) -> FaultyEngine:
    """Replace runtime.engines[engine] by a FaultyEngine around it; returns the wrapper."""
    faulty = FaultyEngine(runtime.engines[engine], after_steps)
    runtime.engines[engine] = faulty
    return faulty
