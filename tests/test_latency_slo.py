"""The latency SLO (policy batching.max_token_latency_ms): the scheduler measures each stream's time
per token from its rounds, the router turns it into a cap on requests running at once (predicting
one more stream from c(B)), the queue holds the rest (priority first), and every admitted request
completes. Scheduler-level tests run on a fake clock (each fake step advances it by a known cost);
the HTTP tests use the fake backend's real sleeps through the real server."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import httpx
import pytest

from contracts.engine import Pause
from gateway.config import GatewayConfig
from gateway.routing.interface import AdmissionLimit, LoadReading
from gateway.routing.monitor import Monitor
from gateway.routing.policy import Policy, PolicyError, parse_policy
from gateway.routing.policy_watch import PolicyStore
from gateway.routing.router import AdaptiveRouter
from gateway.worker.scheduler import SETTLE_ROUNDS, Scheduler
from tests.fakes import FakeBackend, live_server
from tests.ops_helpers import scrape, value

CHAT = "/v1/chat/completions"


# --- the policy fields --------------------------------------------------------------------------
def test_slo_fields_default_off_and_are_validated():
    batching = Policy().batching
    assert batching.max_token_latency_ms is None and batching.slo_exempt_priority is None
    policy = parse_policy("batching:\n  max_token_latency_ms: 60\n  slo_exempt_priority: 5\n")
    assert policy.batching.max_token_latency_ms == 60.0 and policy.batching.slo_exempt_priority == 5
    for bad, where in (("max_token_latency_ms: 0", "max_token_latency_ms"),
                       ("max_token_latency_ms: -5", "max_token_latency_ms"),
                       ("max_token_latency_ms: fast", "max_token_latency_ms"),
                       ("slo_exempt_priority: 1001", "slo_exempt_priority")):
        with pytest.raises(PolicyError) as info:
            parse_policy(f"batching:\n  {bad}\n")
        assert any(line.startswith(f"batching.{where}") for line in info.value.errors), info.value.errors


# --- the router's cap ---------------------------------------------------------------------------
def _router(policy_yaml: str, path=None) -> AdaptiveRouter:
    if path is not None:
        path.write_text(policy_yaml)
        return AdaptiveRouter(PolicyStore(path), Monitor(None), ("raw", "mtp"), classifier=None)
    return AdaptiveRouter(PolicyStore(policy=parse_policy(policy_yaml)), Monitor(None), ("raw", "mtp"),
                          classifier=None)


LINEAR = "batching:\n  prior_row_cost: 1.0\n  max_token_latency_ms: %s\n"   # c(B) = B until measured


def test_no_slo_means_no_cap():
    router = _router("{}")
    assert router.admission_limit(LoadReading(3, 8, 0.5, 3)) == AdmissionLimit(None, None)
    assert router.stats()["admission"]["running_limit"] == 8


def test_cap_is_the_most_streams_predicted_within_the_slo():
    router = _router(LINEAR % 50)
    # 20 ms/token with one stream: c(n) = n predicts 20 n ms, so 2 fit under 50 ms
    assert router.admission_limit(LoadReading(1, 8, 0.020, 1)).requests == 2
    # 40 ms with two running: 20 ms per unit of cost again, still 2
    assert router.admission_limit(LoadReading(2, 8, 0.040, 2)).requests == 2
    # the machine slowed (longer contexts): 60 ms/token alone is already over the SLO; at least one runs
    assert router.admission_limit(LoadReading(4, 8, 0.240, 4)).requests == 1
    # never above --max-batch
    assert router.admission_limit(LoadReading(1, 3, 0.001, 1)).requests == 3
    # nothing measured yet: no one new starts while one runs, and one starts when nothing runs
    assert router.admission_limit(LoadReading(2, 8, None, 0)).requests == 2
    assert router.admission_limit(LoadReading(0, 8, None, 0)).requests == 1


def test_the_prediction_uses_the_learned_batch_costs():
    router = _router("batching:\n  prior_row_cost: 0.1\n  max_token_latency_ms: 30\n")
    # c(n) = 1 + 0.1 (n - 1): 20 ms alone predicts 20 (1 + 0.1 (n - 1)) <= 30 up to n = 6
    assert router.admission_limit(LoadReading(1, 16, 0.020, 1)).requests == 6
    stats = router.stats()["admission"]
    assert stats["max_token_latency_ms"] == 30 and stats["running_limit"] == 6
    assert stats["token_latency_ms"] == pytest.approx(20.0)


def test_exempt_priority_is_passed_to_the_scheduler():
    router = _router("batching:\n  max_token_latency_ms: 10\n  slo_exempt_priority: 5\n")
    assert router.admission_limit(LoadReading(1, 8, 0.5, 1)) == AdmissionLimit(1, 5)


def test_the_slo_follows_live_reloads(tmp_path):
    path = tmp_path / "policy.yaml"
    router = _router(LINEAR % 50, path)
    reading = LoadReading(2, 8, 0.040, 2)
    assert router.admission_limit(reading).requests == 2
    path.write_text(LINEAR % 100)
    assert router.store.reload("test").ok
    assert router.admission_limit(reading).requests == 5
    path.write_text("batching:\n  max_token_latency_ms: 0\n")   # invalid: the old policy (and SLO) stays
    assert not router.store.reload("test").ok
    assert router.admission_limit(reading).requests == 5
    path.write_text("batching:\n  max_token_latency_ms: null\n")
    assert router.store.reload("test").ok
    assert router.admission_limit(reading).requests is None


# --- the scheduler on a fake clock ---------------------------------------------------------------
@dataclass
class Chunk:
    token_ids: list[int]
    finish_reason: str | None = None


class FakeMachine:
    """A worker whose steps take known (fake) time, like a batched decode: the first running request
    of a round pays the forward's base cost, every request its row cost; `phases` change the costs
    at fake times (a slower machine: longer contexts)."""

    def __init__(self, phases: list[tuple[float, float, float]]):
        self.now = 0.0
        self.phases = phases            # (from fake second, base seconds, per-row seconds)
        self.records: list[tuple[float, int, int]] = []   # (fake time, running, running limit) per step
        self.scheduler: Scheduler | None = None
        self.submitted = threading.Event()   # every work of the run is queued

    def clock(self) -> float:
        return self.now

    def costs(self) -> tuple[float, float]:
        current = self.phases[0]
        for phase in self.phases:
            if self.now >= phase[0]:
                current = phase
        return current[1], current[2]

    def work(self, tokens: int, prefill_pieces: int = 0, prefill_seconds: float = 0.0):
        def run(ticket):
            scheduler = self.scheduler
            for _ in range(prefill_pieces):   # a long prompt's prefill, piece by piece
                self.now += prefill_seconds
                yield Pause(0, 1)
            for i in range(tokens):
                base, per_row = self.costs()
                self.now += per_row + (base if scheduler._running and scheduler._running[0] is ticket else 0.0)
                self.records.append((self.now, scheduler.running, scheduler.running_limit))
                yield Chunk([i], "length" if i == tokens - 1 else None)
        return run


async def _drain(ticket) -> list:
    return [item async for item in ticket]


def _run_tickets(machine: FakeMachine, works: list, priorities: list[int] | None = None, first_alone: bool = False,
                 **scheduler_args) -> list:
    """Run the works on a scheduler with the machine's fake clock; `first_alone`: the others are
    submitted once the first one runs."""
    async def main():
        scheduler = Scheduler(max_queue=64, clock=machine.clock, **scheduler_args)
        machine.scheduler = scheduler
        scheduler.start()
        try:
            tickets = []
            for i, work in enumerate(works):
                tickets.append(scheduler.submit(work, priority=(priorities or [0] * len(works))[i]))
                while first_alone and i == 0 and not machine.records:
                    await asyncio.sleep(0.001)
            machine.submitted.set()
            return await asyncio.wait_for(asyncio.gather(*(_drain(t) for t in tickets)), 60)
        finally:
            scheduler.stop()
    return asyncio.run(main())


def test_cap_engages_when_latency_exceeds_the_slo_and_releases_when_it_falls():
    # 20 ms base + 5 ms per row: n streams take 20 + 5 n ms per token; c(n) = 1 + 0.2 (n - 1) exactly.
    # The SLO of 40 ms fits 4 streams (40 ms) of the 8 --max-batch allows. From fake second 3 to 10 the
    # machine is slow (60 ms base): one stream alone takes 65 ms, over the SLO.
    router = _router("batching:\n  prior_row_cost: 0.2\n  max_token_latency_ms: 40\n")
    machine = FakeMachine([(0.0, 0.020, 0.005), (3.0, 0.060, 0.005), (10.0, 0.020, 0.005)])
    results = _run_tickets(machine, [machine.work(50) for _ in range(16)], max_running=8,
                           admission=router.admission_limit)
    # every admitted request ran to its end, none was dropped
    assert [len(items) for items in results] == [50] * 16
    assert all(items[-1].finish_reason == "length" for items in results)

    fast1 = [(t, r, lim) for t, r, lim in machine.records if t < 3.0]
    slow = [(t, r, lim) for t, r, lim in machine.records if 3.0 <= t < 10.0]
    fast2 = [(t, r, lim) for t, r, lim in machine.records if t >= 10.0]
    assert max(r for _, r, _ in fast1) == 4 and max(lim for _, _, lim in fast1) == 4   # not 8: the SLO caps it
    # throughput still rises with load: 4 streams give ~4 / 40 ms = 100 tokens/s, one alone 1 / 25 ms = 40
    assert sum(1 for t, _, _ in fast1 if t > 1.0) / (3.0 - 1.0) > 2 * 40
    # slow: the cap falls to 1 once measured; running requests go on, nobody new starts until all left
    engaged = next(i for i, (_, _, lim) in enumerate(slow) if lim == 1)
    after = [r for _, r, _ in slow[engaged:]]
    assert after and all(b <= a or a == 0 for a, b in zip(after, after[1:]))   # never grows beyond 1 again
    assert after[-1] == 1 and max(after[after.index(1):]) == 1
    # the machine recovers: the cap releases and several streams share it again
    assert max(lim for _, _, lim in fast2) == 4 and max(r for _, r, _ in fast2) == 4


def test_without_an_slo_the_queue_fills_every_slot():
    machine = FakeMachine([(0.0, 0.020, 0.005)])
    _run_tickets(machine, [machine.work(20) for _ in range(6)], max_running=4)
    assert max(r for _, r, _ in machine.records) == 4


def test_prefill_rounds_are_not_measured():
    """A long prompt's prefill pieces stall the round, but the SLO is about decoding: rounds in
    which a request starts or prefills are left out of the per-token latency."""
    machine = FakeMachine([(0.0, 0.0, 0.010)])
    seen: list[LoadReading] = []

    def admission(reading: LoadReading) -> AdmissionLimit:
        seen.append(reading)
        return AdmissionLimit()

    _run_tickets(machine, [machine.work(40), machine.work(10, prefill_pieces=20, prefill_seconds=1.0)],
                 max_running=2, admission=admission)
    measured = [r.token_seconds for r in seen if r.token_seconds is not None]
    assert measured and max(measured) < 0.025   # 10 or 20 ms per token, never the 1 s prefill pieces
    assert {r.measured_running for r in seen if r.token_seconds is not None} <= {1, 2}


def test_latency_is_published_after_settling_at_a_running_count():
    machine = FakeMachine([(0.0, 0.0, 0.010)])
    seen: list[LoadReading] = []

    def admission(reading: LoadReading) -> AdmissionLimit:
        seen.append(reading)
        return AdmissionLimit(1)

    _run_tickets(machine, [machine.work(SETTLE_ROUNDS + 3)], max_running=4, admission=admission)
    measured = [r for r in seen if r.token_seconds is not None]
    assert measured and measured[0].token_seconds == pytest.approx(0.010) and measured[0].measured_running == 1
    # unmeasured: the reading before the first round (nothing runs), after the round that started the
    # request, and after each of the first SETTLE_ROUNDS - 1 decode rounds
    assert len(seen) - len(measured) == 1 + 1 + SETTLE_ROUNDS - 1


def test_higher_priority_waits_first_and_an_exempt_priority_starts_beyond_the_cap():
    machine = FakeMachine([(0.0, 0.0, 0.010)])
    started: list[str] = []

    def named(name: str, tokens: int):
        inner = machine.work(tokens)

        def run(ticket):
            started.append(name)
            for i, item in enumerate(inner(ticket)):
                if i == 1:   # the others are queued while the agent runs
                    assert machine.submitted.wait(10)
                yield item
        return run

    # the SLO allows one stream; priority 5 is exempt (a chat UI beside an agent's long run)
    _run_tickets(machine, [named("agent", 40), named("low", 5), named("mid", 5), named("chat", 5)],
                 priorities=[0, 0, 1, 5], first_alone=True, max_running=4,
                 admission=lambda reading: AdmissionLimit(1, 5))
    assert started == ["agent", "chat", "mid", "low"]
    # the exempt one ran beside the agent; the others waited for the agent to finish (at most 2 at once)
    assert max(r for _, r, _ in machine.records) == 2


def test_a_failing_admission_callable_falls_back_to_max_batch():
    machine = FakeMachine([(0.0, 0.0, 0.010)])

    def broken(reading: LoadReading) -> AdmissionLimit:
        raise RuntimeError("router bug")

    results = _run_tickets(machine, [machine.work(10) for _ in range(3)], max_running=3, admission=broken)
    assert [len(items) for items in results] == [10] * 3
    assert max(r for _, r, _ in machine.records) == 3


# --- through the real server --------------------------------------------------------------------
def _app(tmp_path, slo: str, max_running: int = 4):
    from gateway.http.app import create_app

    backend = FakeBackend(step_seconds=0.02, reply=" ".join(f"w{i}" for i in range(24)))
    path = tmp_path / "policy.yaml"
    path.write_text(f"batching:\n  max_token_latency_ms: {slo}\n")
    router = AdaptiveRouter.from_policy_file(path, backend.engine_names, classifier=None)
    app = create_app(backend, router=router, config=GatewayConfig(max_running=max_running, max_queue=8))
    return app, path


def _concurrent(url: str, n: int, scheduler) -> tuple[list[httpx.Response], int]:
    """n clients at once; returns their responses and the most requests seen running at one time."""
    responses: list = [None] * n
    peak = 0
    done = threading.Event()

    def client(i: int) -> None:
        responses[i] = httpx.post(url + CHAT, json={"messages": [{"role": "user", "content": f"c{i}"}]}, timeout=60)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, scheduler.running)
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    for thread in threads:
        thread.join(60)
    done.set()
    watcher.join()
    return responses, peak


def test_with_a_tight_slo_concurrent_clients_are_queued_not_interleaved_and_all_complete(tmp_path):
    """5 ms per token is below what even one stream takes (20 ms a step): requests run one at a time
    and the others wait in the queue; all of them complete. A live reload lifting the SLO lets the
    next clients interleave again."""
    app, path = _app(tmp_path, "5")
    scheduler = app.state.gateway.scheduler
    with live_server(app) as server:
        url = server.base_url
        responses, peak = _concurrent(url, 3, scheduler)
        assert [r.status_code for r in responses] == [200] * 3
        assert all(r.json()["usage"]["completion_tokens"] == 24 for r in responses)
        assert peak == 1
        admission = httpx.get(url + "/v1/router/stats").json()["admission"]
        assert admission["max_token_latency_ms"] == 5 and admission["running_limit"] == 1
        assert admission["token_latency_ms"] >= 15   # ~20 ms a step, measured by the worker
        metrics = scrape(url)
        assert value(metrics, "switchyard_batch_running_limit") == 1
        assert value(metrics, "switchyard_batch_token_latency_seconds") >= 0.015

        path.write_text("batching:\n  max_token_latency_ms: null\n")
        reload = httpx.post(url + "/admin/reload")
        assert reload.status_code == 200, reload.text
        responses, peak = _concurrent(url, 3, scheduler)
        assert [r.status_code for r in responses] == [200] * 3
        assert peak == 3
        assert value(scrape(url), "switchyard_batch_running_limit") == 4
