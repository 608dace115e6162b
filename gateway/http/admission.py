"""Bounds on what admission itself may hold: bodies being read at once.

Each request body may be up to max_body_bytes; without a bound, many clients uploading at the same
time could make the server buffer all of them. Bodies are read only while a slot is free, so at
most `slots x max_body_bytes` is ever buffered; a request finding no slot gets 429 + Retry-After,
as does one arriving while the queue is full (before its body is read at all).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from gateway.worker.errors import QueueFull


def body_slots(max_queue: int) -> int:
    """Bodies read at once: enough for a full queue plus the running request, never below 4."""
    return max(4, max_queue + 2)


class BodyBudget:
    """Counts bodies being read (event loop only: no lock needed)."""

    def __init__(self, slots: int, retry_after_seconds: int):
        self.slots = slots
        self.retry_after_seconds = retry_after_seconds
        self.in_use = 0

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        if self.in_use >= self.slots:
            raise QueueFull(self.retry_after_seconds)
        self.in_use += 1
        try:
            yield
        finally:
            self.in_use -= 1
