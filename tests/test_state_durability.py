"""kill -9 at any moment leaves a loadable monitor state file (gateway.monitor.write_atomically).

A child process loads the state, then observes and saves in a tight loop; it is SIGKILLed at random
moments, several times in a row. After every kill the file loads without error and keeps what the
earlier runs learned. A control run that writes in place (no temp file + rename) is caught tearing
the file, so the check can fail.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from gateway.routing.monitor import Monitor
from tests.ops_helpers import REPO

WRITER = r"""
import os, random, sys, time
from pathlib import Path
from contracts.engine import StepResult
from gateway.routing import monitor as mon

path, mode = Path(sys.argv[1]), sys.argv[2]
if mode == "in-place":   # the control: what a naive writer does
    def torn_write(target, text):
        with open(target, "w") as handle:
            handle.write(text[: len(text) // 2]); handle.flush(); os.fsync(handle.fileno())
            time.sleep(0.02)
            handle.write(text[len(text) // 2:])
    mon.write_atomically = torn_write
m = mon.Monitor(path)
if m.load_error:
    print("LOAD ERROR", m.load_error, flush=True); sys.exit(1)
print("ready", flush=True)
rng = random.Random()
while True:
    klass, engine = rng.choice(["code", "prose", "structured"]), rng.choice(["raw", "mtp", "ddtree"])
    drafted = 0 if engine == "raw" else 4
    m.observe(klass, StepResult(tokens=[1] * rng.randint(1, 5), drafted=drafted, accepted=rng.randint(0, drafted),
                                seconds=rng.uniform(0.001, 0.05), engine=engine))
    m.save(force=True)
"""


def _run_and_kill(state: Path, mode: str, rng: random.Random) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(state), mode], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.strip() == "ready", first
        time.sleep(rng.uniform(0.05, 0.4))
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _total_steps(monitor: Monitor) -> int:
    return sum(arm["steps"] for arm in monitor.snapshot()["arms"].values())


def test_sigkill_during_rewrites_always_leaves_a_loadable_state(tmp_path):
    state = tmp_path / "router_state.json"
    rng = random.Random(1234)
    learned = 0
    for _ in range(6):
        _run_and_kill(state, "atomic", rng)
        monitor = Monitor(state)
        assert monitor.load_error is None, monitor.load_error
        steps = _total_steps(monitor)
        assert steps >= learned and steps > 0        # what earlier runs learned survived
        learned = steps
    leftovers = list(tmp_path.glob(".router_state.json.*.tmp"))
    assert len(leftovers) <= 6                        # at most one half-written temp file per kill


def test_the_check_catches_a_torn_in_place_write(tmp_path):
    state = tmp_path / "router_state.json"
    rng = random.Random(99)
    torn = 0
    for _ in range(4):
        state.unlink(missing_ok=True)
        _run_and_kill(state, "in-place", rng)
        torn += Monitor(state).load_error is not None
    assert torn >= 1
