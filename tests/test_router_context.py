"""Cost bands by context length: a verify attends T rows over the context where a raw step attends one,
so an engine's cost ratio grows with the context. The monitor keeps step seconds per band
(policy monitor.context_bands), the router prices each request in its own band, and measures a band it
has not priced yet."""

from __future__ import annotations

import random

import httpx
import pytest
from openai import OpenAI
from pydantic import ValidationError

from bench.router_sim import LabelFromUserText
from contracts.engine import StepResult
from gateway.http.app import create_app
from gateway.routing.monitor import Monitor
from gateway.routing.policy import Policy
from tests.fakes import FakeBackend, live_server
from tests.test_router import _request, _router

SHORT, LONG = 200, 3000


def _steps(monitor: Monitor, engine: str, seconds: float, context: int, n: int = 20, sampled: bool = False) -> None:
    for i in range(n):
        monitor.observe("code", StepResult([1, 2], 1, 1, seconds, engine), timed=True, sampled=sampled,
                        context=context + i)


def _monitor(bands=(1024, 4096)) -> Monitor:
    monitor = Monitor(None, 0.05, first_use_steps=0, cost_ewma_alpha=0.05)
    monitor.set_context_bands(bands)
    return monitor


def _cost(monitor: Monitor, engine: str, context: int | None) -> float:
    return monitor.predict("code", engine, 1.0, 1.3, warmup=5, prior_raw_tokens_per_second=50.0, cost_warmup=5,
                           context=context).cost


def test_the_monitor_prices_each_context_band_with_its_own_ratio():
    monitor = _monitor()
    _steps(monitor, "raw", 0.010, SHORT)
    _steps(monitor, "mtp", 0.013, SHORT)
    _steps(monitor, "raw", 0.020, LONG)
    _steps(monitor, "mtp", 0.050, LONG)
    assert _cost(monitor, "mtp", SHORT) == pytest.approx(1.3, rel=0.02)
    assert _cost(monitor, "mtp", LONG) == pytest.approx(2.5, rel=0.02)
    overall = _cost(monitor, "mtp", None)        # no context: the ratio over all steps, between the two
    assert 1.3 < overall < 2.5
    # a band with no steps yet (>= 4096) borrows the overall ratio; with one engine timed there, still
    assert _cost(monitor, "mtp", 6000) == pytest.approx(overall)
    _steps(monitor, "mtp", 0.1, 6000)   # (these steps move the overall ratio too)
    assert _cost(monitor, "mtp", 6000) == pytest.approx(_cost(monitor, "mtp", None))
    assert monitor.band(100) == 0 and monitor.band(1024) == 1024 and monitor.band(5000) == 4096
    bands = monitor.snapshot()["context_bands"]
    assert bands["mtp@1024"]["cost_ratio"] == pytest.approx(2.5, rel=0.02)
    assert bands["mtp@4096"]["cost_ratio"] is None


def test_bands_warm_up_from_the_overall_ratio_and_keep_modes_apart():
    monitor = _monitor()
    _steps(monitor, "raw", 0.010, SHORT, n=40)
    _steps(monitor, "mtp", 0.013, SHORT, n=40)
    _steps(monitor, "raw", 0.020, LONG, n=2)
    _steps(monitor, "mtp", 0.050, LONG, n=2)
    partly = _cost(monitor, "mtp", LONG)          # 2 of cost_warmup 5 steps: between the prior and the band
    assert 1.3 < partly < 2.5
    sampled = monitor.predict("code", "mtp", 1.0, 1.3, 5, 50.0, sampled=True, cost_warmup=5, context=LONG)
    assert sampled.cost == pytest.approx(_cost(monitor, "mtp", None))   # sampled: greedy's overall ratio, no band


def test_no_bands_is_one_band():
    monitor = _monitor(bands=())
    _steps(monitor, "raw", 0.010, SHORT)
    _steps(monitor, "mtp", 0.013, SHORT)
    _steps(monitor, "raw", 0.020, LONG)
    _steps(monitor, "mtp", 0.050, LONG)
    assert _cost(monitor, "mtp", SHORT) == _cost(monitor, "mtp", LONG) == _cost(monitor, "mtp", None)
    assert monitor.snapshot()["context_bands"] == {}


def test_band_seconds_persist_in_the_state_file(tmp_path):
    path = tmp_path / "state.json"
    monitor = Monitor(path, 0.05, first_use_steps=0)
    monitor.set_context_bands([1024])
    _steps(monitor, "raw", 0.02, LONG)
    _steps(monitor, "mtp", 0.05, LONG)
    assert monitor.save(force=True)
    again = Monitor(path, 0.05, first_use_steps=0)
    again.set_context_bands([1024])
    assert _cost(again, "mtp", LONG) == pytest.approx(2.5, rel=0.02)


@pytest.mark.parametrize("edges", [[0], [4096, 1024], [1024, 1024], [-5]])
def test_context_bands_must_be_positive_and_increasing(edges):
    with pytest.raises(ValidationError):
        Policy.model_validate({"monitor": {"context_bands": edges}})


def _simulate(bands: list[int], requests: int = 240, seed: int = 0) -> tuple[dict, dict]:
    """Short and long code requests; mtp's cycle costs 1.3 raw steps at short contexts and 3.0 at long
    ones (raw's step also slows down there). Returns per kind: engine choices over the last half, and
    the decode seconds those requests spent."""
    router = _router({"monitor": {"context_bands": bands, "cost_warmup": 4}, "engines": {"ddtree": {"enabled": False}}},
                     loaded=("raw", "mtp"), seed=seed)
    rng = random.Random(seed)
    choices: dict[str, dict[str, int]] = {"short": {}, "long": {}}
    spent = {"short": 0.0, "long": 0.0}
    for i in range(requests):
        kind = "long" if i % 2 else "short"
        prompt = LONG if kind == "long" else SHORT
        decision = router.choose(_request("code", prompt_tokens=prompt))
        raw_step = 0.010 if kind == "short" else 0.020
        ratio = 1.0 if decision.engine == "raw" else (1.3 if kind == "short" else 3.0)
        router.observe(decision, StepResult([1], 0, 0, 0.2, decision.engine))
        for _ in range(24):
            accepted = 0 if decision.engine == "raw" else int(rng.random() < 0.8)
            seconds = raw_step * ratio * rng.uniform(0.9, 1.1)
            router.observe(decision, StepResult([1] * (1 + accepted), int(decision.engine != "raw"), accepted,
                                                seconds, decision.engine))
            if i >= requests // 2:
                spent[kind] += seconds / (1 + accepted)
        router.finished(decision, None)
        if i >= requests // 2:
            choices[kind][decision.engine] = choices[kind].get(decision.engine, 0) + 1
    return choices, spent


def test_the_router_sends_long_contexts_where_they_run_fastest():
    choices, spent = _simulate([1024])
    # short: mtp pays (1.8 tokens per 1.3 steps); long: it costs 3 steps for 1.8 tokens, raw wins
    assert choices["short"].get("mtp", 0) >= 0.9 * sum(choices["short"].values())
    assert choices["long"].get("raw", 0) >= 0.9 * sum(choices["long"].values())
    blind, blind_spent = _simulate([])     # one band: the pooled ratio (~2.2) sends both kinds to one engine
    assert len({max(c, key=c.get) for c in blind.values()}) == 1
    assert spent["long"] + spent["short"] < 0.9 * (blind_spent["long"] + blind_spent["short"])


def test_a_served_gateway_learns_that_long_prompts_run_faster_on_raw(tmp_path):
    """Through the OpenAI client: the fake's mtp steps cost 1.2x raw's on short prompts, 4x on long ones."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("state: {path: null}\nmonitor: {first_use_steps: 0, cost_warmup: 3, context_bands: [1000]}\n"
                      "exploration: {kind: none}\nengines: {ddtree: {enabled: false}}\n"
                      "priors: {code: {mtp: {accepted: 0.8}}}\n")

    def seconds(engine: str, prompt_tokens: int) -> float:
        raw = 0.002 if prompt_tokens < 1000 else 0.004
        return raw * (1.0 if engine == "raw" else (1.2 if prompt_tokens < 1000 else 4.0))

    from gateway.routing.router import AdaptiveRouter

    backend = FakeBackend(engine_names=("raw", "mtp"), reply=" ".join(["w"] * 12), step_seconds_for=seconds)
    router = AdaptiveRouter.from_policy_file(policy, backend.engine_names, LabelFromUserText())
    with live_server(create_app(backend, router=router)) as server:
        client = OpenAI(base_url=server.base_url + "/v1", api_key="x", http_client=httpx.Client())

        def ask(text: str, engine: str | None = None) -> str:
            extra = {"engine": engine} if engine else {}
            reply = client.chat.completions.with_raw_response.create(
                model="default", messages=[{"role": "user", "content": text}], max_tokens=12, extra_body=extra)
            return reply.headers["X-Switchyard-Engine"]

        long_text = "code" + " " * 1200   # the fake tokenizer: one token per character
        for engine in ("raw", "mtp"):      # forced traffic times both engines at both lengths
            ask("code", engine)
            ask(long_text, engine)
        assert ask("code") == "mtp"
        assert ask(long_text) == "raw"
        bands = httpx.get(server.base_url + "/v1/router/stats").json()
        assert "context_bands" in str(bands)


def test_band_cost_ratios_are_exported_to_prometheus():
    from prometheus_client import CollectorRegistry, generate_latest

    from gateway.observability.router_collector import RouterCollector

    router = _router({"monitor": {"context_bands": [1024], "cost_warmup": 5},
                      "engines": {"mtp": {"prior_cost": 1.3}}})
    registry = CollectorRegistry()
    registry.register(RouterCollector(router))

    def ratio(engine: str, mode: str, band: int) -> float:
        text = generate_latest(registry).decode()
        label = f'switchyard_router_context_cost_ratio{{band="{band}",engine="{engine}",mode="{mode}"}} '
        return float(next(line for line in text.splitlines() if line.startswith(label)).split()[-1])

    assert ratio("mtp", "greedy", 1024) == pytest.approx(1.3)     # the prior, in every band from the start
    assert ratio("ddtree", "sampled", 0) > 0
    _steps(router.monitor, "raw", 0.01, SHORT)
    _steps(router.monitor, "mtp", 0.013, SHORT)
    _steps(router.monitor, "raw", 0.02, LONG)
    _steps(router.monitor, "mtp", 0.05, LONG)
    assert ratio("mtp", "greedy", 1024) == pytest.approx(2.5, rel=0.02)
    assert ratio("mtp", "greedy", 0) == pytest.approx(1.3, rel=0.02)
