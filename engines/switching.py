"""Per-request engine switching on evidence: the running engine's window of accepted draft tokens
against its threshold for every engine the request may move to (contracts.engine.SwitchRule)."""

from __future__ import annotations

from collections import deque

from contracts.engine import SwitchRule


class SwitchWatch:
    """Windows of accepted draft tokens per engine: measured for the running one (`record` after each
    of its verifies), probed for the others (`record_probe`). `choice()` names the engine to move
    to, or None to stay. An engine the request has left is never chosen again (no flapping).

    The running engine's projection reads its current dip: the verifies since its window was last at
    or above the arm's mean (all of them while the first window fills), so a dip that lasts counts
    for more windows of evidence (SwitchRule.carry) while one good window starts the count again."""

    def __init__(self, rule: SwitchRule | None, running: str):
        self.rule = rule
        self.running = running
        self._windows: dict[str, deque[float]] = {}
        self._left: set[str] = set()
        self._dip_sum, self._dip_count = 0.0, 0   # the running engine's verifies in its current dip

    def _window(self, engine: str) -> deque[float]:
        return self._windows.setdefault(engine, deque(maxlen=self.rule.window if self.rule else 1))

    def record(self, accepted: float) -> None:
        window = self._window(self.running)
        window.append(float(accepted))
        self._dip_sum += float(accepted)
        self._dip_count += 1
        mean = self._mean(self.running)
        expected = self.rule.expected.get(self.running) if self.rule is not None else None
        if mean is not None and expected is not None and mean >= expected:
            self._dip_sum, self._dip_count = 0.0, 0

    def record_probe(self, engine: str, accepted: float) -> None:
        if engine != self.running:
            self._window(engine).append(float(accepted))

    def switched(self, engine: str) -> None:
        """The request now runs on `engine`: its own verifies refill its window from here."""
        self._left.add(self.running)
        self._windows.pop(engine, None)
        self.running = engine
        self._dip_sum, self._dip_count = 0.0, 0

    def _mean(self, engine: str) -> float | None:
        """Mean of a full window (raw: exactly 0), None while it fills."""
        if engine == "raw":
            return 0.0
        values = self._windows.get(engine, ())
        return sum(values) / len(values) if self.rule and len(values) == self.rule.window else None

    def _dip_windows(self, engine: str) -> float:
        """How many windows of evidence the engine's projection rests on: the running engine's dip
        once it is longer than a window, else one (a probed engine's window, or a window taken at face
        value: then the last window alone speaks, as before the share was learned)."""
        if self.rule is None or engine != self.running or self._dip_count <= self.rule.window \
                or self.rule.carry(engine) >= 1.0:
            return 1.0
        return self._dip_count / self.rule.window

    def _projected(self, engine: str) -> float | None:
        mean = self._mean(engine)
        if mean is None or self.rule is None:
            return None
        windows = self._dip_windows(engine)
        if windows > 1.0:
            mean = self._dip_sum / self._dip_count
        return self.rule.projected(engine, mean, windows)

    def gain(self, other: str) -> float | None:
        """How far the running engine's projected alpha is below its threshold against `other`
        (> 0: moving pays, beyond margin and noise), None until both windows are full."""
        if self.rule is None:
            return None
        mine, theirs = self._projected(self.running), self._projected(other)
        if mine is None or theirs is None:
            return None
        return self.rule.threshold(self.running, other, theirs, self._dip_windows(self.running)) - mine

    def choice(self, allowed: tuple[str, ...] | None = None) -> str | None:
        """The engine to hand the request to now, or None. `allowed` narrows the rule's targets
        (to raw once the other engines are no longer probed)."""
        if self.rule is None:
            return None
        candidates = [e for e in (allowed if allowed is not None else self.rule.targets)
                      if e != self.running and e in self.rule.targets and e not in self._left]
        gains = {e: g for e in candidates if (g := self.gain(e)) is not None and g > 0}
        if not gains:
            return None
        # the fastest alternative is the one with the highest break-even for the running engine
        return max(gains, key=lambda e: self.rule.break_even(self.running, e, self._projected(e) or 0.0))
