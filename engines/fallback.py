"""Mid-request hand-off of a speculative engine to raw when acceptance falls below break-even."""

from __future__ import annotations

from collections import deque

from contracts.engine import FallbackRule


class FallbackWatch:
    """Tracks accepted draft tokens over the last `window` steps; trips once, never resets."""

    def __init__(self, rule: FallbackRule | None):
        self.rule = rule
        self._recent: deque[int] = deque(maxlen=rule.window if rule else 1)
        self.tripped = False

    def record(self, accepted: int) -> bool:
        """Record one verify step; True when the request should continue on raw."""
        if self.rule is None or self.tripped:
            return self.tripped
        self._recent.append(accepted)
        if len(self._recent) == self.rule.window:
            self.tripped = sum(self._recent) / self.rule.window < self.rule.min_accepted
        return self.tripped
