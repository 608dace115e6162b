"""Online monitor: EWMA with warm-up, cost ratio, drift, thread safety, atomic persistence."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from contracts.engine import StepResult
from gateway.routing.monitor import Autosaver, Ewma, Monitor, write_atomically

RAW_TPS_PRIOR = 40.0


def _spec_step(accepted: int, drafted: int = 4, seconds: float = 0.02, engine: str = "ddtree") -> StepResult:
    return StepResult(tokens=[1] * (accepted + 1), drafted=drafted, accepted=accepted, seconds=seconds, engine=engine)


def _raw_step(seconds: float = 0.01) -> StepResult:
    return StepResult(tokens=[1], seconds=seconds, engine="raw")


def _predict(monitor: Monitor, klass="code", engine="ddtree", prior_accepted=1.0, prior_cost=2.0, warmup=10):
    return monitor.predict(klass, engine, prior_accepted, prior_cost, warmup, RAW_TPS_PRIOR)


def test_ewma_is_a_plain_mean_at_first_then_exponential():
    stat = Ewma()
    for value in (1.0, 2.0, 3.0):
        stat.update(value, 0.1)
    assert stat.mean == pytest.approx(2.0)
    assert stat.var == pytest.approx(2.0 / 3.0)  # population variance of 1, 2, 3
    for _ in range(7):
        stat.update(2.0, 0.1)
    before = stat.mean
    stat.update(12.0, 0.1)  # n = 11 > 1 / 0.1: weight 0.1 from now on
    assert stat.mean == pytest.approx(before + 0.1 * (12.0 - before))
    assert stat.effective_n(0.1) == 11.0
    for _ in range(100):
        stat.update(2.0, 0.1)
    assert stat.effective_n(0.1) == pytest.approx(19.0)  # an EWMA remembers (2 - w) / w samples


def test_prior_until_data_then_blend_then_measured():
    monitor = Monitor(None, ewma_alpha=0.05)
    prior = _predict(monitor)
    assert prior.accepted == 1.0 and prior.cost == 2.0 and prior.n_accepted == 0
    assert prior.speedup == pytest.approx(1.0)
    assert prior.tokens_per_second == pytest.approx(RAW_TPS_PRIOR)

    for _ in range(5):  # half of the warm-up: half prior, half measurement
        monitor.observe("code", _spec_step(3))
    halfway = _predict(monitor)
    assert halfway.n_accepted == 5
    assert halfway.accepted == pytest.approx(0.5 * 3 + 0.5 * 1.0)

    for _ in range(5):
        monitor.observe("code", _spec_step(3))
    warm = _predict(monitor)
    assert warm.accepted == pytest.approx(3.0)
    # other classes and engines are untouched
    assert _predict(monitor, klass="prose").accepted == 1.0
    assert _predict(monitor, engine="mtp", prior_accepted=0.4).accepted == 0.4


def test_cost_ratio_and_speedup_from_measured_step_times():
    monitor = Monitor(None, first_use_steps=0)
    for _ in range(20):
        monitor.observe("prose", _raw_step(0.010))
        monitor.observe("code", _spec_step(2, seconds=0.015, engine="mtp", drafted=2))
    p = _predict(monitor, engine="mtp", prior_accepted=0.0, prior_cost=9.0, warmup=10)
    assert p.cost == pytest.approx(1.5)
    assert p.accepted == pytest.approx(2.0)
    assert p.speedup == pytest.approx((1 + 2.0) / 1.5)
    assert p.tokens_per_second == pytest.approx(100.0 * 2.0)  # raw's measured 100 steps/s x speedup
    raw = _predict(monitor, engine="raw")
    assert raw.speedup == 1.0 and raw.tokens_per_second == pytest.approx(100.0)
    assert monitor.measured_cost("mtp") == (pytest.approx(1.5), 20)
    measured = monitor.snapshot()["arms"]["code/mtp"]
    assert measured["tokens_per_second"] == pytest.approx(3 / 0.015)


def test_step_costs_are_ratios_within_one_decoding_mode():
    """Sampled steps cost more than greedy ones, by engine-dependent amounts: each mode's cost ratio
    is its steps against raw's steps of the same mode (one pooled mean per engine mixed them, and a
    raw that served only sampled requests made ddtree look cheaper to greedy ones than it was)."""
    monitor = Monitor(None, first_use_steps=0)
    for _ in range(20):
        monitor.observe("prose", _raw_step(0.010))
        monitor.observe("prose", _raw_step(0.012), sampled=True)
        monitor.observe("code", _spec_step(2, seconds=0.024))
        monitor.observe("code", _spec_step(2, seconds=0.030), sampled=True)
    greedy = monitor.predict("code", "ddtree", 1.0, 2.0, 10, RAW_TPS_PRIOR)
    sampled = monitor.predict("code", "ddtree", 1.0, 2.0, 10, RAW_TPS_PRIOR, sampled=True)
    assert greedy.cost == pytest.approx(2.4) and sampled.cost == pytest.approx(2.5)
    assert greedy.tokens_per_second == pytest.approx(100.0 * 3 / 2.4)      # raw's greedy rate
    assert sampled.tokens_per_second == pytest.approx(1 / 0.012 * 3 / 2.5)  # raw's sampled rate
    engines = monitor.snapshot()["engines"]
    assert engines["ddtree"]["cost_ratio"] == pytest.approx(2.4)
    assert engines["ddtree/sampled"]["cost_ratio"] == pytest.approx(2.5)


def test_a_mode_without_timing_borrows_the_other_modes_ratio():
    monitor = Monitor(None, first_use_steps=0)
    for _ in range(20):
        monitor.observe("prose", _raw_step(0.012), sampled=True)   # raw only ever sampled
        monitor.observe("code", _spec_step(2, seconds=0.030), sampled=True)
        monitor.observe("code", _spec_step(2, seconds=0.024))       # ddtree also greedy
    assert monitor.measured_cost("ddtree") == (pytest.approx(2.5), 20)   # not 0.024 / 0.012
    assert monitor.measured_cost("ddtree", sampled=True) == (pytest.approx(2.5), 20)
    assert monitor.measured_cost("mtp") == (1.0, 0)


def test_a_process_skips_each_engine_and_modes_first_steps_and_clips_stalls():
    """The first cycles of each kind compile: a few such stalls read sampled MTP on the H200 at 9.3 raw
    steps for hundreds of steps (its steps cost 2.0). They are skipped per (engine, mode); later a step
    over stall_factor x the running mean counts as that much."""
    monitor = Monitor(None, first_use_steps=4, stall_factor=8.0)
    for seconds in (2.0, 1.5, 0.3, 0.1):              # first uses: compiles
        monitor.observe("code", _spec_step(2, seconds=seconds))
        monitor.observe("prose", _raw_step(0.010))
    assert monitor.measured_cost("ddtree") == (1.0, 0)
    for i in range(40):
        monitor.observe("code", _spec_step(2, seconds=0.024 if i != 20 else 5.0))   # one GC pause
        monitor.observe("prose", _raw_step(0.010))
    cost, n = monitor.measured_cost("ddtree")
    assert n == 40 and cost == pytest.approx((39 * 0.024 + 8 * 0.024) / 40 / 0.010)   # the pause counts 8x
    # sampled steps are their own first uses
    monitor.observe("code", _spec_step(2, seconds=3.0), sampled=True)
    assert "ddtree/sampled" not in monitor.snapshot()["engines"]


def test_spread_steps_keep_their_mean():
    """Pipelined cycles' reads alternate short and long: the mean is what they cost, not the typical
    step (a log-domain mean read sampled ddtree on the H200 at 1.48 raw steps where it cost 2.2)."""
    monitor = Monitor(None, first_use_steps=0)
    for i in range(60):
        monitor.observe("code", _spec_step(2, seconds=0.004 if i % 2 else 0.036))
        monitor.observe("prose", _raw_step(0.010))
    assert monitor.measured_cost("ddtree")[0] == pytest.approx(2.0)


def test_untimed_steps_count_acceptance_but_not_time():
    monitor = Monitor(None)
    monitor.observe("code", _spec_step(4, seconds=5.0), timed=False)  # a prefill-laden first step
    snap = monitor.snapshot()
    assert snap["arms"]["code/ddtree"]["accepted_observations"] == 1
    assert snap["arms"]["code/ddtree"]["seconds_per_step"] is None
    assert "ddtree" not in snap["engines"]


def test_estimates_follow_drift():
    monitor = Monitor(None, ewma_alpha=0.02)
    for _ in range(500):
        monitor.observe("code", _spec_step(3))
    assert _predict(monitor).accepted == pytest.approx(3.0)
    for _ in range(300):  # acceptance collapses (e.g. the traffic changed)
        monitor.observe("code", _spec_step(0))
    assert _predict(monitor).accepted < 0.01 * 3 + 0.01  # (1 - 0.02)^300 of the old level remains


def test_concurrent_observe_and_predict_lose_nothing():
    monitor = Monitor(None)
    errors: list[BaseException] = []

    def writer(klass: str) -> None:
        try:
            for i in range(2000):
                monitor.observe(klass, _spec_step(i % 5, seconds=0.01 + (i % 3) * 0.001))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(2000):
                _predict(monitor, klass="code")
                monitor.snapshot()
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in ("code", "code", "prose")] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    arms = monitor.snapshot()["arms"]
    assert arms["code/ddtree"]["steps"] == 4000 and arms["prose/ddtree"]["steps"] == 2000
    assert arms["code/ddtree"]["accepted_total"] == 2 * sum(i % 5 for i in range(2000))


def _trained(path: Path | None) -> Monitor:
    monitor = Monitor(path)
    for i in range(30):
        monitor.observe("code", _spec_step(i % 4))
        monitor.observe("prose", _raw_step())
    return monitor


def test_state_survives_a_restart(tmp_path):
    path = tmp_path / "state" / "router.json"
    before = _trained(path)
    assert before.save() is True
    assert before.save() is False  # nothing changed since
    after = Monitor(path)
    assert after.load_error is None
    assert after.snapshot() == before.snapshot()
    assert _predict(after) == _predict(before)


@pytest.mark.parametrize(
    "content",
    [b"\x00\xff garbage", b"{\"format\": 1, \"arms\": {\"code/mtp\": {\"accepted\": \"lots\"}}}", b"[]", b"{\"format\": 99}", b""],
    ids=["binary", "wrong-types", "not-an-object", "future-format", "empty"],
)
def test_corrupt_state_file_is_ignored(tmp_path, content, caplog):
    path = tmp_path / "router.json"
    path.write_bytes(content)
    monitor = Monitor(path)
    assert monitor.load_error
    assert monitor.snapshot()["arms"] == {}
    assert "ignored" in caplog.text
    monitor.observe("code", _spec_step(1))
    assert monitor.save()
    assert Monitor(path).load_error is None  # the next save repairs it


def test_unreadable_state_file_is_ignored(tmp_path):
    path = tmp_path / "router.json"
    path.mkdir()  # reading a directory raises IsADirectoryError
    monitor = Monitor(path)
    assert monitor.load_error and monitor.snapshot()["arms"] == {}
    assert monitor.save() is False  # logged, not raised


def test_state_file_is_always_loadable_while_being_rewritten(tmp_path):
    path = tmp_path / "router.json"
    monitor = _trained(path)
    monitor.save(force=True)
    stop = threading.Event()
    failures: list[str] = []

    def read_loop() -> None:
        while not stop.is_set():
            try:
                json.loads(path.read_text())
            except (ValueError, OSError) as exc:
                failures.append(repr(exc))

    reader = threading.Thread(target=read_loop)
    reader.start()
    try:
        for i in range(200):
            monitor.observe("code", _spec_step(i % 3))
            monitor.save()
    finally:
        stop.set()
        reader.join()
    assert not failures
    assert Monitor(path).snapshot() == monitor.snapshot()
    assert [p.name for p in tmp_path.iterdir()] == ["router.json"]  # no temp files left behind


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "router.json"
    write_atomically(path, '{"old": true}')

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_atomically(path, '{"new": true}')
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["router.json"]


def test_autosaver_saves_periodically_and_on_stop(tmp_path):
    path = tmp_path / "router.json"
    monitor = Monitor(path)
    saver = Autosaver(monitor, interval=0.05)
    saver.start()
    monitor.observe("code", _spec_step(2))
    deadline = threading.Event()
    for _ in range(100):
        if path.exists():
            break
        deadline.wait(0.02)
    assert path.exists()
    monitor.observe("code", _spec_step(2))
    saver.stop()
    assert Monitor(path).snapshot()["arms"]["code/ddtree"]["steps"] == 2


def test_step_cost_replaces_its_prior_after_cost_warmup_steps_while_alpha_still_blends():
    monitor = Monitor(None, first_use_steps=0)
    for _ in range(8):
        monitor.observe("prose", _raw_step(0.010))
        monitor.observe("code", _spec_step(2, seconds=0.025, engine="mtp", drafted=2))
    common = dict(prior_accepted=0.0, prior_cost=1.15, warmup=50, prior_raw_tokens_per_second=RAW_TPS_PRIOR)
    quick = monitor.predict("code", "mtp", **common, cost_warmup=8)
    assert quick.cost == pytest.approx(2.5)                          # measured: the prior is gone
    assert quick.accepted == pytest.approx(8 / 50 * 2.0)             # alpha: 8 of 50 observations
    assert quick.tokens_per_second == pytest.approx(100.0 * quick.speedup)
    slow = monitor.predict("code", "mtp", **common)                  # cost_warmup defaults to warmup
    assert slow.cost == pytest.approx(8 / 50 * 2.5 + 42 / 50 * 1.15)


def test_step_seconds_remember_longer_than_acceptance_across_a_machine_slowdown():
    """Each engine is timed only while it runs: after raw's 300 steps at 10 ms, the machine slows 30 %
    for a minute in which only ddtree runs (26 ms instead of 20). With the acceptance's short memory
    its cost ratio read 2.6 (the slow minute against raw's fast one); with the cost weight's long
    memory it stays near the true 2.0. Acceptance keeps its own, short memory."""
    def run(monitor: Monitor) -> tuple[float, float]:
        for _ in range(300):
            monitor.observe("code", _raw_step(0.010))
        for _ in range(300):
            monitor.observe("code", _spec_step(1, seconds=0.020))
        for _ in range(200):
            monitor.observe("code", _spec_step(3, seconds=0.026))
        cost, _ = monitor.measured_cost("ddtree")
        return cost, _predict(monitor).accepted

    short_cost, short_accepted = run(Monitor(None, ewma_alpha=0.02, first_use_steps=0))
    long_cost, long_accepted = run(Monitor(None, ewma_alpha=0.02, first_use_steps=0, cost_ewma_alpha=0.002))
    assert short_cost > 2.5
    assert 2.0 <= long_cost < 2.3
    assert short_accepted == long_accepted > 2.9   # acceptance follows its last 100 steps either way
    reloaded = Monitor(None, first_use_steps=0)
    reloaded.set_ewma_alpha(0.02, 0.002)
    assert run(reloaded)[0] == pytest.approx(long_cost)
    assert reloaded.snapshot()["cost_ewma_alpha"] == 0.002


def test_window_persistence_is_learned_per_engine_and_mode_and_one_until_warm():
    """Pairs of consecutive windows in a request: a request-level level plus window noise. When the
    level varies little against the noise (transient dips) the next window keeps little of a window's
    deviation; when requests differ and windows agree (lasting dips) it keeps most of it."""
    import random

    rng = random.Random(0)
    monitor = Monitor(None, ewma_alpha=0.01, first_use_steps=0)
    for _ in range(400):
        level = 2.0 + rng.gauss(0, 0.1)                  # greedy-like: requests alike, windows noisy
        monitor.observe_windows("ddtree", level + rng.gauss(0, 0.8), level + rng.gauss(0, 0.8))
        level = 1.0 + rng.gauss(0, 0.8)                  # sampled-like: requests differ, windows agree
        monitor.observe_windows("ddtree", level + rng.gauss(0, 0.1), level + rng.gauss(0, 0.1), sampled=True)
    assert monitor.persistence("ddtree", False, warmup=30) < 0.15     # ~0.02 = 0.1^2 / (0.1^2 + 0.8^2)
    assert monitor.persistence("ddtree", True, warmup=30) > 0.9       # ~0.98
    assert monitor.persistence("mtp", False, warmup=30) == 1.0        # never measured: the window as it is
    assert monitor.persistence("ddtree", False, warmup=1000) == 1.0   # not warm yet
    fresh = Monitor(None)
    fresh.observe_windows("ddtree", 1.0, 3.0)
    assert fresh.persistence("ddtree", True, warmup=1) == 1.0         # one mode's pairs are not the other's
    assert monitor.snapshot()["persistence"]["ddtree/sampled"]["pairs"] == 400


def test_window_pairs_persist_in_the_state_file(tmp_path):
    path = tmp_path / "state.json"
    monitor = Monitor(path)
    for previous, following in ((1.0, 2.0), (3.0, 2.0), (2.0, 2.5)):
        monitor.observe_windows("mtp", previous, following)
    assert monitor.save()
    again = Monitor(path)
    assert again.load_error is None
    assert again.persistence("mtp", False, warmup=3) == monitor.persistence("mtp", False, warmup=3) < 1.0
