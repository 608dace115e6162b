"""Per engine, pipelined or host cycles by measurement (engines/cycle_modes.py): on a GPU each engine
tries both on live requests and keeps the cheaper; a forced mode or the CPU backend fixes it. Both
modes take the same greedy steps, so the choice only changes speed."""

from __future__ import annotations

import pytest

from contracts.sampling import SamplingParams
from engines import cycle_modes, kernels
from engines.cycle_modes import CycleModes
from engines.ddtree import DDTreeEngine
from engines.dflash import load_drafter
from engines.mtp import MTPEngine
from engines.mtp_head import load_mtp_head
from engines.raw import RawEngine
from gateway.observability.collectors import BackendCollector
from tests.engine_helpers import PROMPTS, encode, run_engine

GREEDY = SamplingParams(temperature=0.0, max_tokens=64)


@pytest.fixture(scope="module")
def agree_engines(tiny_agree_bundle, tiny_agree_drafter):
    bundle = tiny_agree_bundle
    return bundle, {"mtp": MTPEngine(bundle, load_mtp_head(bundle)),
                    "ddtree": DDTreeEngine(bundle, load_drafter(tiny_agree_drafter, bundle), budget=4)}


@pytest.fixture
def unforced(monkeypatch):
    """No mode forced (the tests force pipelined cycles through the environment by default)."""
    monkeypatch.delenv("SWITCHYARD_PIPELINED", raising=False)
    with kernels.using(pipelined=None):
        yield


def _run_request(modes: CycleModes, engine: str, seconds: dict[bool, float], cycles: int = 10) -> bool:
    mode = modes.choose(engine)
    for i in range(cycles):
        modes.record(engine, mode, i, seconds[mode])
    return mode


def test_tries_both_then_keeps_the_cheaper_and_reprobes(unforced):
    modes = CycleModes(adaptive=True)
    cost = {True: 0.004, False: 0.006}     # pipelined cheaper (MTP on a launch-bound GPU)
    trial = [_run_request(modes, "mtp", cost) for _ in range(2 * cycle_modes.TRIAL_REQUESTS)]
    assert trial.count(True) == trial.count(False) == cycle_modes.TRIAL_REQUESTS
    assert modes.preferred("mtp") is True
    later = [_run_request(modes, "mtp", cost) for _ in range(2 * cycle_modes.REPROBE_EVERY)]
    assert later.count(False) == 2 and later.count(True) == len(later) - 2   # one re-check per REPROBE_EVERY
    # costs drift (a longer context, a busier machine): the re-checks move the choice
    cost = {True: 0.009, False: 0.006}
    for _ in range(cycle_modes.TIMED_CYCLES * cycle_modes.REPROBE_EVERY // 8):
        _run_request(modes, "mtp", cost)
        if modes.preferred("mtp") is False:
            break
    assert modes.preferred("mtp") is False
    # engines are measured apart
    assert modes.preferred("ddtree") is None
    stats = modes.stats()
    assert stats["mtp"]["pipelined"] == 0.0 and stats["mtp"]["host_seconds"] == pytest.approx(0.006)


def test_first_cycles_are_not_timed(unforced):
    modes = CycleModes(adaptive=True)
    mode = modes.choose("ddtree")
    for i, seconds in enumerate([1.0, 1.0] + [0.01] * 5):   # compiles and the prefill's tail
        modes.record("ddtree", mode, i, seconds)
    assert modes.stats()["ddtree"][f"{'pipelined' if mode else 'host'}_seconds"] == pytest.approx(0.01)


def test_forced_or_cpu_modes_are_fixed(unforced, monkeypatch):
    modes = CycleModes()                   # automatic: adaptive only on a GPU
    if not modes.adaptive():
        assert [modes.choose("mtp") for _ in range(8)] == [False] * 8   # the CPU backend: host cycles
        assert modes.preferred("mtp") is False
    monkeypatch.setenv("SWITCHYARD_PIPELINED", "1")
    adaptive = CycleModes(adaptive=True)
    assert not adaptive.adaptive() and [adaptive.choose("mtp") for _ in range(8)] == [True] * 8
    with kernels.using(pipelined=False):
        assert adaptive.choose("ddtree") is False and adaptive.preferred("ddtree") is False


@pytest.mark.parametrize("name", ["mtp", "ddtree"])
def test_engines_measure_both_modes_and_stay_lossless(agree_engines, unforced, name):
    """A bundle measuring both modes (as on a GPU): requests alternate, every one equals raw, both
    modes' cycles are timed, and the engine then settles on one."""
    bundle, engines = agree_engines
    saved = bundle.cycle_modes
    bundle.cycle_modes = CycleModes(adaptive=True)
    try:
        for i in range(2 * cycle_modes.TRIAL_REQUESTS + 1):
            ids = encode(bundle, PROMPTS[i % len(PROMPTS)])
            want = run_engine(RawEngine(bundle), ids, 40, GREEDY)[0]
            assert run_engine(engines[name], ids, 40, GREEDY)[0] == want
        sampled = SamplingParams(temperature=0.8, seed=3, max_tokens=16)
        run_engine(engines[name], encode(bundle, PROMPTS[0]), 16, sampled)
        assert bundle.cycle_modes.stats()[engines[name].cycle_key + "/sampled"]["pipelined_requests"] == 1
        stats = bundle.cycle_modes.stats()[engines[name].cycle_key]
        assert stats["pipelined_requests"] >= cycle_modes.TRIAL_REQUESTS
        assert stats["host_requests"] >= cycle_modes.TRIAL_REQUESTS
        assert stats["pipelined_seconds"] > 0 and stats["host_seconds"] > 0
        assert stats["pipelined"] in (0.0, 1.0)
    finally:
        bundle.cycle_modes = saved


def test_cycle_modes_are_exported_as_gauges():
    class Backend:
        engine_names = ("raw", "mtp", "ddtree")

        def memory_bytes(self):
            return {}

        def cycle_mode_stats(self):
            return {"mtp": {"pipelined_seconds": 0.004, "host_seconds": 0.006, "pipelined_requests": 3.0,
                            "host_requests": 3.0, "pipelined": 1.0}}

    families = {f.name: f for f in BackendCollector(Backend()).collect()}
    seconds = {tuple(s.labels.values()): s.value for s in families["switchyard_spec_cycle_seconds"].samples}
    assert seconds[("mtp", "greedy", "pipelined")] == 0.004 and seconds[("mtp", "greedy", "host")] == 0.006
    assert seconds[("ddtree", "greedy", "host")] != seconds[("ddtree", "greedy", "host")]   # NaN: not measured
    assert seconds[("mtp", "sampled", "host")] != seconds[("mtp", "sampled", "host")]
    pipelined = {tuple(s.labels.values()): s.value for s in families["switchyard_spec_cycle_pipelined"].samples}
    assert pipelined[("mtp", "greedy")] == 1.0 and pipelined[("ddtree", "greedy")] != pipelined[("ddtree", "greedy")]
