"""Which cycle a speculative request runs: pipelined (cycle n+1 queued before cycle n's verdict is
read, engines/speculative.py) or the host cycle (read the verdict, then draft and verify again).

Neither wins everywhere. Pipelining hides the host's read behind the device's work, but its graph is
larger (all-row masks, the tree built and walked on the device), so where the host's launches, not
the device, set the pace — a small model on a fast GPU — the larger graph can cost more than the wait
it removes (on an H100 with the demo model DDTree's pipelined cycle took 6.6 ms against 5.8 ms for the
host one, MTP's 4.2 ms against 5.9 ms: BENCHMARKS.md). So on a GPU each engine measures both on live
traffic, a few requests each, keeps the one cheaper per cycle, and re-checks the other now and then.
The CPU backend keeps the host cycle (MLX computes on the host's own cores: nothing overlaps), and
`SWITCHYARD_PIPELINED=1/0` or `kernels.fast_paths.pipelined` fix the mode everywhere.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .kernels import forced_pipelined, pipelined_cycles

TRIAL_REQUESTS = 3     # requests per mode before an engine compares them
REPROBE_EVERY = 50     # then one request in this many runs the other mode (costs drift with load and length)
SKIP_CYCLES = 2        # a request's first cycles carry compiles and the prefill's tail: not timed
TIMED_CYCLES = 64      # the cost is a running mean over about this many recent cycles


@dataclass
class ModeCost:
    """Measured seconds per cycle of one engine in one mode."""

    requests: int = 0
    cycles: int = 0
    seconds: float = 0.0   # running mean per cycle, over the last ~TIMED_CYCLES


class CycleModes:
    """Per engine: pipelined or host cycles for the next request, from the cycles measured so far."""

    def __init__(self, adaptive: bool | None = None):
        self._adaptive = adaptive          # None: decided per call (a forced mode or the device may change)
        self._costs: dict[tuple[str, bool], ModeCost] = {}
        self._since_probe: dict[str, int] = {}
        self._lock = threading.Lock()      # stats are read by scrapes on other threads

    def adaptive(self) -> bool:
        """Whether the mode is measured (a GPU, nothing forced) rather than fixed."""
        if forced_pipelined() is not None:
            return False
        return self._adaptive if self._adaptive is not None else pipelined_cycles()

    def choose(self, engine: str) -> bool:
        """True: run this request's cycles of `engine` pipelined."""
        with self._lock:
            if not self.adaptive():
                mode = self._fixed()
            else:
                pipelined, host = self._cost(engine, True), self._cost(engine, False)
                if not self._compared(pipelined, host):
                    mode = pipelined.requests <= host.requests   # alternate, pipelined first
                else:
                    best = pipelined.seconds <= host.seconds
                    self._since_probe[engine] = self._since_probe.get(engine, 0) + 1
                    mode = best
                    if self._since_probe[engine] >= REPROBE_EVERY:
                        self._since_probe[engine] = 0
                        mode = not best
            self._cost(engine, mode).requests += 1
            return mode

    def record(self, engine: str, pipelined: bool, cycle: int, seconds: float) -> None:
        """One timed cycle (`cycle`: its index in the request's run of this engine, from 0)."""
        if cycle < SKIP_CYCLES:
            return
        with self._lock:
            cost = self._cost(engine, pipelined)
            cost.cycles += 1
            cost.seconds += (seconds - cost.seconds) / min(cost.cycles, TIMED_CYCLES)

    def preferred(self, engine: str) -> bool | None:
        """The mode `engine` runs when not probing (None: still trying both)."""
        with self._lock:
            if not self.adaptive():
                return self._fixed()
            pipelined, host = self._costs.get((engine, True)), self._costs.get((engine, False))
            if pipelined is None or host is None or not self._compared(pipelined, host):
                return None
            return pipelined.seconds <= host.seconds

    @staticmethod
    def _compared(pipelined: ModeCost, host: ModeCost) -> bool:
        return min(pipelined.requests, host.requests) >= TRIAL_REQUESTS and bool(pipelined.cycles and host.cycles)

    @staticmethod
    def _fixed() -> bool:
        forced = forced_pipelined()
        return forced if forced is not None else pipelined_cycles()

    def stats(self) -> dict[str, dict[str, float]]:
        """{engine: {pipelined_seconds, host_seconds, pipelined_requests, host_requests, pipelined}}."""
        engines = sorted({engine for engine, _ in self._costs})
        out: dict[str, dict[str, float]] = {}
        for engine in engines:
            with self._lock:
                costs = {mode: self._costs.get((engine, mode), ModeCost()) for mode in (True, False)}
            preferred = self.preferred(engine)
            out[engine] = {
                "pipelined_seconds": costs[True].seconds, "host_seconds": costs[False].seconds,
                "pipelined_requests": float(costs[True].requests), "host_requests": float(costs[False].requests),
                "pipelined": float("nan") if preferred is None else float(preferred),
            }
        return out

    def _cost(self, engine: str, pipelined: bool) -> ModeCost:
        return self._costs.setdefault((engine, pipelined), ModeCost())
