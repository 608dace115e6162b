"""The running requests' memory budget (--request-memory-bytes): a request counts for what its caches hold (its
context so far, and room to grow 256 tokens, at most prompt + max_tokens). One that would not fit beside the
running ones' waits, routed, ahead of the queue, until they have freed enough; when the running ones outgrow the
budget, the newest gives its caches back and goes on later from its last token (tests/test_release.py for the
engines' side)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from gateway.config import GatewayConfig
from gateway.http.app import create_app
from tests.fakes import FakeBackend, live_server
from tests.test_batching import metric, openai_answers
from tests.test_gateway_scheduler import Background, chat, wait_until

CHAT = "/v1/chat/completions"
LONG_REPLY = " ".join(f"w{i}" for i in range(30))


def _reserve(backend: FakeBackend, prompt: str, max_tokens: int) -> int:
    """What the scheduler reserves for this chat on the fake (its template, then prompt + max_tokens)."""
    from tests.fakes import fake_chat_template

    tokens = len(fake_chat_template([{"role": "user", "content": prompt}])) + max_tokens
    return backend.request_bytes(tokens)


@contextmanager
def _first_running(reply: str, max_tokens: int, step_seconds: float) -> Iterator[tuple]:
    """A server whose budget holds one request of `max_tokens` and a half, the first of them decoding:
    (backend, scheduler, server, the first request, its reservation)."""
    backend = FakeBackend(step_seconds=step_seconds, reply=reply)
    one = _reserve(backend, "first", max_tokens)
    app = create_app(backend, config=GatewayConfig(max_running=4, request_memory_bytes=one + one // 2))
    scheduler = app.state.gateway.scheduler
    with live_server(app) as server:
        first = Background(server.base_url + CHAT, chat("first", max_tokens=max_tokens))
        wait_until(lambda: scheduler.running == 1 and backend.started.is_set())
        yield backend, scheduler, server, first, one


def test_a_request_that_does_not_fit_waits_for_the_running_one_and_then_runs():
    with _first_running(LONG_REPLY, 30, step_seconds=0.03) as (backend, scheduler, server, first, one):
        url = server.base_url + CHAT
        second = Background(url, chat("other", max_tokens=30))
        wait_until(lambda: scheduler.waiting_for_memory == 1)
        metrics = httpx.get(server.base_url + "/metrics").text
        assert metric(metrics, "switchyard_requests_waiting_memory") == 1.0
        assert metric(metrics, "switchyard_requests_waiting") == 1.0
        assert metric(metrics, "switchyard_request_memory_reserved_bytes") == one
        assert metric(metrics, "switchyard_request_memory_budget_bytes") == one + one // 2
        assert len(backend.calls) == 1                     # parked before any model work
        assert first.response().status_code == 200
        reply = second.response()
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 30
        assert len(backend.calls) == 2 and scheduler.waiting == 0 and scheduler.reserved_bytes == 0


def test_requests_that_fit_together_run_together():
    backend = FakeBackend(step_seconds=0.03, reply=LONG_REPLY)
    one = _reserve(backend, "first", 30)
    app = create_app(backend, config=GatewayConfig(max_running=4, request_memory_bytes=3 * one))
    scheduler = app.state.gateway.scheduler
    with live_server(app) as server:
        url = server.base_url + CHAT
        requests = [Background(url, chat("first", max_tokens=30)) for _ in range(3)]
        wait_until(lambda: scheduler.running == 3)
        assert scheduler.waiting_for_memory == 0
        assert all(r.response().status_code == 200 for r in requests)


def test_one_request_larger_than_the_budget_still_runs_alone():
    backend = FakeBackend(step_seconds=0.0, reply=LONG_REPLY)
    app = create_app(backend, config=GatewayConfig(max_running=4, request_memory_bytes=10))
    with live_server(app) as server:
        reply = httpx.post(server.base_url + CHAT, json=chat("big", max_tokens=30), timeout=30)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 30


def test_waiting_for_memory_goes_before_the_queue_and_frees_its_place_on_disconnect():
    reply = " ".join(f"w{i}" for i in range(60))
    with _first_running(reply, 60, step_seconds=0.05) as (backend, scheduler, server, first, _):
        url = server.base_url + CHAT
        # a client that gives up while its request waits for memory: it leaves without touching the model
        gone = Background(url, chat("gone", max_tokens=60), timeout=0.4)
        wait_until(lambda: scheduler.waiting_for_memory == 1)
        gone.thread.join(10)
        assert isinstance(gone.result, httpx.TimeoutException)
        wait_until(lambda: scheduler.waiting == 0)
        parked = Background(url, chat("parked", max_tokens=60))
        wait_until(lambda: scheduler.waiting_for_memory == 1)
        small = Background(url, chat("small", max_tokens=1))   # would fit, but waits behind the parked one
        wait_until(lambda: scheduler.waiting == 2)
        assert first.thread.is_alive()                       # all of that while the first one ran
        assert first.response().status_code == 200
        assert parked.response().status_code == 200 and small.response().status_code == 200
    prompts = [call["prompt_ids"] for call in backend.calls]
    assert len(prompts) == 3 and len(prompts[2]) < len(prompts[1])   # first, parked, then small; never "gone"
    assert scheduler.idle


async def _drain(ticket) -> list:
    """Every item of a scheduler ticket's stream."""
    return [item async for item in ticket]


def test_a_request_whose_deadline_passes_while_it_waits_for_memory_gets_its_timeout():
    """Scheduler level: the running request's step outlasts the waiting one's deadline."""
    import asyncio
    import time
    from types import SimpleNamespace

    from gateway.worker.errors import RequestTimedOut
    from gateway.worker.scheduler import Scheduler

    def work(steps: int, seconds: float):
        def run(ticket):
            yield SimpleNamespace(reserve_tokens=80)
            for i in range(steps):
                time.sleep(seconds)
                yield SimpleNamespace(token_ids=[i], finish_reason="length" if i == steps - 1 else None)
        return run

    async def main():
        scheduler = Scheduler(max_queue=4, max_running=4, memory_budget=100, reserve=lambda tokens: tokens)
        scheduler.start()
        try:
            running = scheduler.submit(work(10, 0.05))
            while scheduler.running == 0:
                await asyncio.sleep(0.005)
            waiting = scheduler.submit(work(3, 0.0))
            waiting.deadline, waiting.timeout = time.monotonic() + 0.15, 0.15
            while scheduler.waiting_for_memory == 0:
                await asyncio.sleep(0.005)
            first = await _drain(running)
            try:
                await _drain(waiting)
            except RequestTimedOut:
                return first, "timed out", scheduler.waiting
            return first, "ran", scheduler.waiting
        finally:
            scheduler.stop()

    first, outcome, left = asyncio.run(main())
    assert len(first) == 11 and outcome == "timed out" and left == 0


def test_no_budget_runs_them_together():
    backend = FakeBackend(step_seconds=0.03, reply=LONG_REPLY)
    app = create_app(backend, config=GatewayConfig(max_running=4))
    scheduler = app.state.gateway.scheduler
    with live_server(app) as server:
        url = server.base_url + CHAT
        requests = [Background(url, chat(f"r{i}", max_tokens=30)) for i in range(2)]
        wait_until(lambda: scheduler.running == 2)
        assert all(r.response().status_code == 200 for r in requests)


def test_openai_clients_with_long_contexts_take_turns_within_the_budget(tiny_agree_target, tiny_agree_drafter):
    """A real server and the openai client: two agents with long prompts and a budget for one. The second
    waits for the first (never both generating), both get the answers they get alone."""
    from engines.runtime import load_runtime

    runtime = load_runtime(tiny_agree_target, draft_dir=tiny_agree_drafter, dtype="float32")
    runtime.set_batching(4)
    prompts = [" ".join([f"agent {i} reads the long file"] * 60) for i in range(2)]

    def ask(client, prompt: str) -> str:
        reply = client.completions.create(model="default", prompt=prompt, max_tokens=32, temperature=0,
                                          extra_body={"engine": "raw"})
        return reply.choices[0].text

    generating = {"now": 0, "most": 0}
    generate = runtime.generate

    def counted(*args, **kwargs):
        generating["now"] += 1
        generating["most"] = max(generating["most"], generating["now"])
        try:
            yield from generate(*args, **kwargs)
        finally:
            generating["now"] -= 1

    runtime.generate = counted
    want, _ = openai_answers(runtime, prompts, ask)
    generating["most"] = 0
    got, _ = openai_answers(runtime, prompts, ask, GatewayConfig(max_running=4), at_once=True)
    assert got == want and generating["most"] == 2   # without a budget they overlap
    generating["most"] = 0
    budget = runtime.request_bytes(max(len(runtime.encode_prompt(p)) for p in prompts) + 32) * 3 // 2
    got, _ = openai_answers(runtime, prompts, ask, GatewayConfig(max_running=4, request_memory_bytes=budget),
                            at_once=True)
    assert got == want and generating["most"] == 1


def test_a_requests_cost_is_its_caches(tiny_agree_target):
    """RequestCost against what mlx-lm allocates: the target's caches after n tokens (n a multiple of the
    KV cache's 256-row step) hold exactly its bytes for n."""
    import mlx.core as mx

    from engines.runtime import load_runtime, request_cost

    runtime = load_runtime(tiny_agree_target, dtype="float32")
    bundle = runtime.bundle
    cost = request_cost(bundle, None, None)
    for n in (256, 512):
        cache = bundle.make_cache()
        bundle.model(mx.zeros((1, n), dtype=mx.uint32), cache=cache)
        mx.eval([c.state for c in cache])
        assert sum(c.nbytes for c in cache) == cost.bytes(n)
    assert runtime.request_bytes(512) >= cost.bytes(512)


def test_inspect_reports_the_caches_the_server_reserves(tiny_target, tiny_drafter):
    """`switchyard inspect` (configs only, nothing loaded) and the server's per-request reservation read one
    formula (engines.request_cost): at any context, inspect's memory for all engines less their weights is
    what the loaded runtime reserves for a request, below the drafter's context window and past it."""
    from engines.checkpoint_info import inspect_checkpoint
    from engines.runtime import load_runtime

    runtime = load_runtime(str(tiny_target), draft_dir=str(tiny_drafter), dtype="float32")
    assert runtime.engine_names == ("raw", "mtp", "ddtree")
    for context in (1000, 9000):
        info = inspect_checkpoint(tiny_target, draft_dir=tiny_drafter, context=context, cpu=True)
        assert set(info.weights.dtypes) == {"F32"}   # run as stored: the weights count once
        weights = info.weights.bytes + info.drafter["bytes"]
        assert info.memory["all engines"] - weights == runtime.request_bytes(context) > 0


def test_requests_run_on_what_their_caches_hold_and_the_newest_gives_them_back_as_they_grow():
    """Two chats of 600 tokens: each starts on its prompt + 256 tokens, which fit together (prompt + max_tokens
    would not: the second would wait for the first). As they write, they outgrow the budget: the newer one gives
    its caches back, waits, and finishes after the older one; the older one is never asked."""
    reply = " ".join(f"w{i}" for i in range(600))
    backend = FakeBackend(step_seconds=0.002, reply=reply)
    start = _reserve(backend, "first", 256)
    budget = 2 * start + 10 * 100      # the two prompts + 256 tokens each, and 100 tokens more
    assert 2 * _reserve(backend, "first", 600) > budget
    app = create_app(backend, config=GatewayConfig(max_running=4, request_memory_bytes=budget))
    scheduler = app.state.gateway.scheduler
    with live_server(app) as server:
        url = server.base_url + CHAT
        first = Background(url, chat("first", max_tokens=600))
        wait_until(lambda: len(backend.calls) == 1)
        second = Background(url, chat("other", max_tokens=600, stream=True))
        wait_until(lambda: len(backend.calls) == 2)     # started beside the first: nothing waited for memory
        wait_until(lambda: scheduler.waiting_for_memory == 1)
        assert scheduler.running == 1 and scheduler.reserved_bytes <= budget
        answer = first.response()
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == reply
        streamed = second.response()
        assert streamed.status_code == 200
        text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                       for line in streamed.text.splitlines() if line.startswith("data: {"))
        assert text == reply
        metrics = httpx.get(server.base_url + "/metrics").text
    assert backend.released and {call for call, _ in backend.released} == {1}
    assert all(0 < written < 600 for _, written in backend.released)
    assert metric(metrics, "switchyard_requests_released_total") == len(backend.released) == scheduler.releases
    assert scheduler.idle and scheduler.reserved_bytes == 0


def _growing(name: str, tokens: int, log: list[tuple[str, int]], routed: dict[str, bool]):
    """Scheduler-level work: routed with a 10-token prompt, then one token per item up to `tokens`, giving its
    caches back whenever asked (logged as (name, written); its end as (name, -1)). It writes nothing (yields a
    Pause) until every request of `routed` has been routed."""
    from types import SimpleNamespace

    from contracts.engine import Pause, Released

    def run(ticket):
        yield SimpleNamespace(reserve_tokens=10 + tokens, prompt_tokens=10)
        routed[name] = True
        while not all(routed.values()):
            yield Pause(0, 0)
        written = 0
        while written < tokens:
            if ticket.cancel_token.release_asked:
                ticket.cancel_token.released()
                log.append((name, written))
                yield Released(written, written)
                continue
            written += 1
            yield SimpleNamespace(token_ids=[written], finish_reason="length" if written == tokens else None)
        log.append((name, -1))
    return run


def _run_growing(plan: list[tuple[str, int]], stagger: bool = False) -> tuple[list[int], int, list[tuple[str, int]]]:
    """(name, priority) requests of 300 tokens each on a scheduler whose budget holds two at their start and one
    grown (reserve = tokens: a request counts for its context + 256). `stagger`: each submitted once the ones
    before it run, and none writes until the first two are routed. Returns the tokens each got, the releases
    counted, and the log."""
    import asyncio

    from gateway.worker.scheduler import Scheduler

    log: list[tuple[str, int]] = []
    routed = {name: False for name, _ in plan[:2]} if stagger else {}

    async def main():
        scheduler = Scheduler(max_queue=4, max_running=4, memory_budget=600, reserve=lambda tokens: tokens)
        scheduler.start()
        try:
            tickets = []
            for name, priority in plan:
                tickets.append(scheduler.submit(_growing(name, 300, log, routed), priority=priority))
                while stagger and tickets[-1].order == 0:   # not started yet
                    await asyncio.sleep(0.001)
            items = await asyncio.gather(*(_drain(t) for t in tickets))
            return [sum(1 for i in got if getattr(i, "token_ids", None)) for got in items], scheduler.releases
        finally:
            scheduler.stop()

    counts, releases = asyncio.run(main())
    return counts, releases, log


def test_a_released_request_resumes_before_queued_ones_and_the_oldest_always_runs():
    """Scheduler level: three requests that each grow past the budget alone. The oldest runs to its end without a
    release; the others give their caches back and finish in the order they started, none lost."""
    counts, releases, log = _run_growing([("a", 0), ("b", 0), ("c", 0)])
    assert counts == [300, 300, 300]
    ends = [name for name, written in log if written == -1]
    assert ends == ["a", "b", "c"]
    released = [name for name, written in log if written >= 0]
    assert "a" not in released and released and releases == len(released)


def test_the_lower_priority_request_gives_way_though_it_started_first():
    """A request of priority 5 started after one of priority 0: when both outgrow the budget, the older one of
    lower priority gives its caches back and the higher one runs to its end first."""
    counts, releases, log = _run_growing([("low", 0), ("high", 5)], stagger=True)
    assert counts == [300, 300]
    assert [name for name, written in log if written >= 0] == ["low"] and releases == 1
    assert [name for name, written in log if written == -1] == ["high", "low"]
