"""Router: convergence on simulated engines, priors, every decision reason, quarantine, fallback
rules, persistence across restarts, stats and Prometheus export."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from bench.router_sim import DEFAULT_WORLD, LabelFromUserText, SimWorld, run_request, simulate
from contracts.engine import StepResult, SwitchRule
from contracts.errors import EngineFailure, InvalidRequestError
from contracts.names import ROUTE_REASONS as REASONS
from contracts.request_text import RequestText
from engines.switching import SwitchWatch
from gateway.observability.router_collector import RouterCollector
from gateway.routing.interface import RouteRequest
from gateway.routing.monitor import Monitor
from gateway.routing.policy import Policy
from gateway.routing.policy_watch import PolicyStore
from gateway.routing.router import AdaptiveRouter


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _router(policy: dict | None = None, loaded=("raw", "mtp", "ddtree"), classifier=None, clock=None, monitor=None, seed=0):
    # these tests time steps from the first one: the first-use skip has its own tests (test_monitor.py)
    policy = {**(policy or {}), "monitor": {"first_use_steps": 0, **(policy or {}).get("monitor", {})}}
    validated = Policy.model_validate(policy)
    return AdaptiveRouter(
        PolicyStore(policy=validated),
        monitor or Monitor(None, validated.monitor.ewma_alpha),
        loaded,
        classifier if classifier is not None else LabelFromUserText(),
        rng=random.Random(seed),
        clock=clock or FakeClock(),
    )


def _request(klass="code", forced=None, prompt_tokens=100, response_format=None, queue_depth=0,
             concurrent=0) -> RouteRequest:
    return RouteRequest(RequestText(user=klass, response_format=response_format), forced, prompt_tokens, queue_depth,
                        concurrent=concurrent)


NO_EXPLORE = {"exploration": {"kind": "none"}}
# priors that make ddtree the clear choice for every class
DDTREE_PRIORS = {
    "exploration": {"kind": "none"},
    "priors": {k: {"ddtree": {"accepted": 3.0, "cost": 1.5}} for k in ("code", "prose", "structured")},
}


@pytest.mark.parametrize(
    "exploration, requests, burn_in",
    [({"kind": "thompson"}, 300, 100), ({"kind": "epsilon", "epsilon": 0.05}, 400, 150)],
    ids=["thompson", "epsilon"],
)
def test_converges_to_the_best_engine_per_class(exploration, requests, burn_in, record_property):
    policy = Policy.model_validate({"exploration": exploration})
    results = simulate(policy, DEFAULT_WORLD, requests_per_class=requests, burn_in=burn_in, seed=3)
    for klass, result in results.items():
        oracle = DEFAULT_WORLD.oracle(klass, ("raw", "mtp", "ddtree"))
        record_property(f"{klass}_best_share", round(result.accuracy, 4))
        record_property(f"{klass}_regret_fraction", round(result.regret_fraction, 4))
        print(f"{klass}: oracle {oracle} picked {result.accuracy:.1%} (non-explore, after {burn_in}); "
              f"regret {result.regret_seconds:.2f} s = {result.regret_fraction:.1%} of oracle time; {result.chosen}")
        assert result.judged > 0.8 * (requests - burn_in)
        assert result.accuracy >= 0.95, (klass, result.chosen)
        # learning from priors that are wrong for code and prose costs a bounded amount
        assert 0.0 <= result.regret_fraction < 0.10, (klass, result.regret_fraction)


def test_priors_are_respected_before_warmup_and_overridden_after():
    # true world: raw is best for prose; the priors claim ddtree is 2.67x
    world = DEFAULT_WORLD
    rng = random.Random(5)
    cold = _router({**DDTREE_PRIORS, "monitor": {"warmup": 10_000}})
    picks = [run_request(cold, world, "prose", rng)[0].engine for _ in range(40)]
    assert picks == ["ddtree"] * 40  # hundreds of steps measured, still below the warm-up count

    warm = _router({**DDTREE_PRIORS, "monitor": {"warmup": 50}})
    decisions = [run_request(warm, world, "prose", rng)[0] for _ in range(40)]
    assert decisions[0].engine == "ddtree" and decisions[0].reason == "monitor"
    assert [d.engine for d in decisions[-10:]] == ["raw"] * 10  # measurements replaced the prior


def test_a_wrong_prior_cost_steers_only_the_first_requests():
    # a GPU-like machine: mtp costs 2.5 raw steps, not the prior's 1.15, so it loses (0.72x) despite
    # the prior's promise (1.8 / 1.15 = 1.57x); requests are short (16 tokens, ~9 verify steps each)
    world = SimWorld(accepted={k: {"mtp": 0.8, "ddtree": 0.8} for k in ("code", "prose", "structured")},
                     cost={"mtp": 2.5, "ddtree": 4.0}, completion_tokens=16, noise_sd=0.0)
    policy = {"exploration": {"kind": "none"}, "engines": {"ddtree": {"enabled": False}},
              "priors": {"code": {"mtp": {"accepted": 0.8}}}}

    def mtp_requests(cost_warmup: int) -> int:
        router = _router({**policy, "monitor": {"warmup": 50, "cost_warmup": cost_warmup}})
        for _ in range(20):  # raw's step time is known (forced raw traffic, earlier fallbacks)
            router.monitor.observe("prose", StepResult([7], seconds=world.raw_step_seconds, engine="raw"))
        rng = random.Random(1)
        return sum(run_request(router, world, "code", rng)[0].engine == "mtp" for _ in range(20))

    assert mtp_requests(8) == 1      # one request measures the cost; raw from then on
    assert mtp_requests(50) > 3      # with the cost blended as slowly as alpha, the prior steers longer


def test_fallback_threshold_allows_for_the_noise_of_a_window_of_steps():
    policy = {**NO_EXPLORE, "engines": {"ddtree": {"enabled": False}}, "fallback": {"window": 8, "margin": 0.1},
              "monitor": {"warmup": 10, "cost_warmup": 4}}
    router = _router(policy)
    raw, mtp = router.choose(_request(forced="raw")), router.choose(_request(forced="mtp"))
    for i in range(40):  # c = 1.5, break-even 0.5; 3 of 4 steps accept: alpha 0.75, per-step sd 0.433
        router.observe(raw, StepResult([1], seconds=0.010, engine="raw"))
        accepted = int(i % 4 != 0)
        router.observe(mtp, StepResult([1, 2][: 1 + accepted], drafted=1, accepted=accepted, seconds=0.015, engine="mtp"))
    decision = router.choose(_request())
    assert decision.engine == "mtp"                                   # 1.75 / 1.5 = 1.17x
    sd = (0.75 * 0.25) ** 0.5   # projected through the prior share 0.5 of a one-window dip
    assert decision.switch.threshold("mtp", "raw") == pytest.approx(0.5 - 0.1 - 1.645 * 0.5 * sd / 8**0.5)
    blind = SwitchRule(window=8, margin=0.1, evidence_z=0.0, costs={"mtp": 1.5})   # margin only, as before

    def trips(rule: SwitchRule, alpha: float, seed: int) -> bool:
        rng, watch = random.Random(seed), SwitchWatch(rule, "mtp")
        for _ in range(64):   # a 128-token request
            watch.record(int(rng.random() < alpha))
            if watch.choice(("raw",)) == "raw":
                return True
        return False

    # a healthy engine: the noise-blind rule hands nearly half the requests to raw on a run of bad luck
    assert sum(trips(blind, 0.75, s) for s in range(200)) > 60     # 89 of 200 with these seeds
    assert sum(trips(decision.switch, 0.75, s) for s in range(200)) < 10   # 2 of 200
    # acceptance that really collapsed still hands off, every time
    assert all(trips(decision.switch, 0.05, s) for s in range(200))


def test_forced_engine_wins_and_has_no_switch_rule():
    router = _router(DDTREE_PRIORS | {"rules": [{"engine": "raw"}]})
    decision = router.choose(_request(forced="mtp", queue_depth=100))
    assert (decision.engine, decision.reason, decision.switch) == ("mtp", "forced", None)
    assert decision.klass == "code" and decision.policy_version == 1
    assert router.choose(_request(forced="auto")).reason == "rule"


def test_rules_match_class_prompt_length_and_response_format():
    rules = [
        {"name": "long", "when": {"min_prompt_tokens": 1000}, "engine": "raw"},
        {"name": "json", "when": {"response_formats": ["json_object"]}, "engine": "mtp"},
        {"name": "code-short", "when": {"classes": ["code"], "max_prompt_tokens": 50}, "engine": "mtp"},
    ]
    router = _router(DDTREE_PRIORS | {"rules": rules})
    assert (router.choose(_request(prompt_tokens=5000)).engine, router.choose(_request(prompt_tokens=5000)).reason) == ("raw", "rule")
    json_decision = router.choose(_request("prose", response_format="json_object"))
    assert (json_decision.engine, json_decision.klass, json_decision.reason) == ("mtp", "structured", "rule")
    assert router.choose(_request("code", prompt_tokens=20)).reason == "rule"
    unmatched = router.choose(_request("prose", prompt_tokens=20))
    assert (unmatched.engine, unmatched.reason) == ("ddtree", "monitor")


def test_response_format_json_means_structured_without_asking_the_classifier():
    class Exploding:
        def predict(self, *args, **kwargs):
            raise AssertionError("classifier must not be called")

    router = _router(NO_EXPLORE, classifier=Exploding())
    assert router.choose(_request("code", response_format="json_schema")).klass == "structured"


def test_classifier_failure_falls_back_to_the_default_class():
    class Broken:
        def predict(self, *args, **kwargs):
            raise RuntimeError("model file missing")

    router = _router({**NO_EXPLORE, "default_class": "code"}, classifier=Broken())
    assert router.choose(_request("prose")).klass == "code"
    assert router.stats()["classifier_errors"] == 1


def test_engine_error_quarantines_then_recovers():
    clock = FakeClock()
    router = _router({**DDTREE_PRIORS, "quarantine_seconds": 30}, clock=clock)
    first = router.choose(_request("code"))
    assert first.engine == "ddtree"
    router.finished(first, EngineFailure("ddtree", RuntimeError("kernel fault")))
    assert router.quarantined() == {"ddtree": 30.0}

    during = router.choose(_request("code"))
    assert during.engine != "ddtree" and during.reason == "health"
    clock.now += 29.0
    assert router.choose(_request("code")).reason == "health"
    clock.now += 1.5
    after = router.choose(_request("code"))
    assert (after.engine, after.reason) == ("ddtree", "monitor")
    assert router.quarantined() == {}


def test_errors_that_are_not_the_engines_fault_do_not_quarantine():
    router = _router(DDTREE_PRIORS)
    decision = router.choose(_request())
    router.finished(decision, InvalidRequestError("bad top_p", param="top_p"))
    router.finished(decision, None)
    raw_decision = router.choose(_request(forced="raw"))
    router.finished(raw_decision, RuntimeError("raw broke"))  # raw is the floor: never quarantined
    assert router.quarantined() == {}
    # an EngineFailure names the engine that failed, e.g. raw after a mid-request hand-off
    router.finished(decision, EngineFailure("mtp", RuntimeError("x")))
    assert set(router.quarantined()) == {"mtp"}


def test_quarantine_uses_the_policy_the_request_was_admitted_with(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("quarantine_seconds: 10\nexploration: {kind: none}\n")
    clock = FakeClock()
    router = AdaptiveRouter(PolicyStore(path), Monitor(None), ("raw", "mtp", "ddtree"), LabelFromUserText(), clock=clock)
    admitted = router.choose(_request())
    path.write_text("quarantine_seconds: 500\nexploration: {kind: none}\n")
    assert router.reload().ok
    router.finished(admitted, EngineFailure(admitted.engine, RuntimeError("x")))
    assert router.quarantined() == {admitted.engine: 10.0}
    assert router.choose(_request(forced="raw")).policy_version == 2


def test_rule_to_a_quarantined_engine_goes_elsewhere_for_health():
    router = _router(DDTREE_PRIORS | {"rules": [{"when": {"classes": ["prose"]}, "engine": "mtp"}]})
    router.finished(router.choose(_request("prose")), EngineFailure("mtp", RuntimeError("x")))
    decision = router.choose(_request("prose"))
    assert (decision.engine, decision.reason) == ("ddtree", "health")


def test_engines_that_are_not_loaded_are_never_picked():
    router = _router(DDTREE_PRIORS, loaded=("raw", "mtp"))
    decisions = [router.choose(_request(k)) for k in ("code", "prose", "structured")]
    assert all(d.engine != "ddtree" and d.reason == "health" for d in decisions)
    with pytest.raises(ValueError):
        _router(loaded=("mtp",))


def test_deep_queue_falls_back_to_raw():
    router = _router({**DDTREE_PRIORS, "queue": {"raw_above_depth": 2}})
    assert router.choose(_request(queue_depth=2)).engine == "ddtree"
    decision = router.choose(_request(queue_depth=3))
    assert (decision.engine, decision.reason, decision.switch) == ("raw", "fallback", None)


def test_epsilon_exploration_picks_another_engine():
    router = _router({**DDTREE_PRIORS, "exploration": {"kind": "epsilon", "epsilon": 1.0}})
    decisions = [router.choose(_request()) for _ in range(200)]
    assert all(d.reason == "explore" and d.engine != "ddtree" for d in decisions)
    assert {d.engine for d in decisions} == {"raw", "mtp"}
    never = _router({**DDTREE_PRIORS, "exploration": {"kind": "epsilon", "epsilon": 0.0}})
    assert all(never.choose(_request()).reason == "monitor" for _ in range(50))


def test_thompson_explores_uncertain_arms_only():
    # prior sd is large and the two speculative arms are close: Thompson sometimes tries the other
    close = _router({"exploration": {"kind": "thompson", "thompson_prior_sd": 1.0}})
    reasons = {close.choose(_request("structured")).reason for _ in range(200)}
    assert reasons == {"monitor", "explore"}
    # a far-ahead arm with a tight prior is never second-guessed
    sure = _router({**DDTREE_PRIORS, "exploration": {"kind": "thompson", "thompson_prior_sd": 0.01}})
    assert all(sure.choose(_request()).reason == "monitor" for _ in range(100))


def test_every_reason_is_produced():
    clock = FakeClock()
    router = _router(
        {**DDTREE_PRIORS, "exploration": {"kind": "epsilon", "epsilon": 0.3}, "queue": {"raw_above_depth": 1},
         "rules": [{"when": {"classes": ["structured"]}, "engine": "mtp"}]},
        clock=clock,
    )
    seen = {router.choose(_request(forced="raw")).reason, router.choose(_request("structured")).reason,
            router.choose(_request(queue_depth=5)).reason, router.choose(_request(concurrent=3)).reason}
    seen |= {router.choose(_request()).reason for _ in range(50)}
    router.finished(router.choose(_request(forced="ddtree")), RuntimeError("boom"))
    seen.add(router.choose(_request()).reason)
    assert seen == set(REASONS)


def test_switch_rule_comes_from_the_measured_cost_ratio():
    router = _router({**NO_EXPLORE, "priors": {"code": {"mtp": {"accepted": 5.0}}}, "fallback": {"window": 6, "margin": 0.1},
                      "monitor": {"warmup": 10}})
    before = router.choose(_request())
    assert before.engine == "mtp"
    assert before.switch.window == 6
    # prior cost 1.15; no data yet, so the prior sd (0.5) stands in for the per-step spread, and the
    # policy's prior share of a window's dip that lasts (0.5) scales its noise
    assert before.switch.threshold("mtp", "raw") == pytest.approx(1.15 - 1 - 0.1 - 1.645 * 0.5 * 0.5 / 6**0.5)
    decision = router.choose(_request(forced="raw"))
    for _ in range(20):  # raw steps 10 ms, mtp steps 18 ms => c = 1.8, break-even 0.8
        router.observe(decision, StepResult([1], seconds=0.010, engine="raw"))
        router.observe(before, StepResult([1, 2], drafted=1, accepted=1, seconds=0.018, engine="mtp"))
    after = router.choose(_request())
    assert after.switch.threshold("mtp", "raw") == pytest.approx(0.8 - 0.1)  # every step accepted: no spread
    off = _router({**NO_EXPLORE, "fallback": {"enabled": False}, "priors": {"code": {"mtp": {"accepted": 5.0}}}})
    assert off.choose(_request()).switch is None


def test_the_first_two_steps_of_a_request_are_not_timed():
    """The first step carries the prefill; the second the engine's own prefill work, evaluated lazily
    with the first cycle (the MTP head's rows, the drafter's context over the prompt)."""
    router = _router(NO_EXPLORE)
    decision = router.choose(_request(forced="mtp"))
    router.observe(decision, StepResult([1], seconds=3.0, engine="mtp"))             # prefill + first token
    router.observe(decision, StepResult([1, 2], 1, 1, seconds=0.3, engine="mtp"))    # + the head's prompt rows
    for _ in range(5):
        router.observe(decision, StepResult([1, 2], 1, 1, seconds=0.01, engine="mtp"))
    router.finished(decision, None)
    assert router.monitor.snapshot()["engines"]["mtp"]["seconds_per_step"] == pytest.approx(0.01)
    second = router.choose(_request(forced="mtp"))
    router.observe(second, StepResult([1], seconds=3.0, engine="mtp"))
    router.observe(second, StepResult([1, 2], 1, 1, seconds=0.3, engine="mtp"))
    assert router.monitor.snapshot()["engines"]["mtp"]["timed_steps"] == 5


def test_steps_after_a_hand_off_are_credited_to_raw():
    router = _router(DDTREE_PRIORS)
    decision = router.choose(_request())
    router.observe(decision, StepResult([1, 2], drafted=4, accepted=1, seconds=0.1, engine="ddtree"))
    router.observe(decision, StepResult([3], seconds=0.01, engine="raw"))
    arms = router.monitor.snapshot()["arms"]
    assert arms["code/ddtree"]["steps"] == 1 and arms["code/raw"]["steps"] == 1


def test_learned_state_survives_a_restart(tmp_path):
    state = tmp_path / "router_state.json"
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(f"state: {{path: {state}}}\nexploration: {{kind: none}}\nmonitor: {{warmup: 5}}\n")
    first = AdaptiveRouter.from_policy_file(policy_file, ("raw", "mtp", "ddtree"), LabelFromUserText())
    first.start(watch_policy=False)
    rng = random.Random(0)
    for _ in range(30):
        run_request(first, DEFAULT_WORLD, "prose", rng)
    before = {k: v["engines"] for k, v in first.stats()["classes"].items()}
    first.close()  # saves on shutdown
    second = AdaptiveRouter.from_policy_file(policy_file, ("raw", "mtp", "ddtree"), LabelFromUserText())
    assert second.monitor.load_error is None
    assert {k: v["engines"] for k, v in second.stats()["classes"].items()} == before
    assert second.choose(_request("prose")).engine == "raw"  # learned, not the mtp prior


def test_corrupt_state_file_does_not_stop_startup(tmp_path):
    state = tmp_path / "router_state.json"
    state.write_text("{ not json")
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(f"state: {{path: {state}}}\n")
    router = AdaptiveRouter.from_policy_file(policy_file, ("raw", "mtp", "ddtree"), classifier=None)
    assert router.stats()["state_file"]["load_error"]
    assert router.choose(_request()).engine in ("raw", "mtp", "ddtree")


def test_stats_and_gauges_export():
    router = _router(NO_EXPLORE)
    rng = random.Random(1)
    for klass in ("code", "prose"):
        run_request(router, DEFAULT_WORLD, klass, rng)
    stats = json.loads(json.dumps(router.stats()))
    assert set(stats["classes"]) == {"code", "prose", "structured"}
    assert stats["classes"]["code"]["engines"]["mtp"]["predicted_tokens_per_second"] > 0
    assert sum(d["count"] for d in stats["decisions"]) == 2
    assert stats["policy"]["version"] == 1
    rows = router.gauge_values()
    assert ("code", "raw", "predicted_speedup", 1.0) in rows
    assert any(metric == "measured_tokens_per_second" for _, _, metric, _ in rows)

    registry = CollectorRegistry()
    registry.register(RouterCollector(router))
    text = generate_latest(registry).decode()
    assert 'switchyard_router_predicted_tokens_per_second{class="code",engine="mtp"}' in text
    assert 'switchyard_router_engine_quarantined{engine="ddtree"} 0.0' in text
    assert 'switchyard_policy_reloads_total{result="failure"} 0.0' in text
    assert "switchyard_policy_last_reload_success_timestamp_seconds" in text


def test_observe_is_safe_after_finished_and_for_unknown_engines():
    router = _router(NO_EXPLORE)
    decision = router.choose(_request())
    router.finished(decision, None)
    router.observe(decision, StepResult([1], seconds=0.01, engine="raw"))
    router.observe(decision, StepResult([1], seconds=0.01, engine="warp-drive"))
    assert "code/warp-drive" not in router.monitor.snapshot()["arms"]


def test_shipped_classifier_is_loaded_when_present_and_optional_otherwise(monkeypatch, tmp_path):
    import sys
    import types

    from gateway.routing import router as router_module

    class Loaded:
        def predict(self, request):
            return LabelFromUserText._Prediction("structured", {})

    good = types.ModuleType("classifier")
    good.Classifier = types.SimpleNamespace(load=lambda path=None: Loaded())
    monkeypatch.setitem(sys.modules, "classifier", good)
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("state: {path: null}\n")
    routed = AdaptiveRouter.from_policy_file(policy_file, ("raw",))
    assert isinstance(routed.classifier, Loaded)
    assert routed.choose(_request("code")).klass == "structured"

    def broken_load(path=None):
        raise FileNotFoundError("model.json")

    good.Classifier = types.SimpleNamespace(load=broken_load)
    assert router_module.load_classifier() is None
    monkeypatch.setitem(sys.modules, "classifier", types.ModuleType("classifier"))  # no Classifier yet
    assert router_module.load_classifier() is None
    fallback = AdaptiveRouter.from_policy_file(policy_file, ("raw",))
    assert fallback.classifier is None and fallback.choose(_request("code")).klass == "prose"


def test_router_follows_drift_in_acceptance():
    policy = Policy.model_validate({})
    router = _router({})
    rng = random.Random(11)
    for _ in range(150):
        run_request(router, DEFAULT_WORLD, "code", rng)
    assert router.choose(_request("code")).engine == "ddtree"
    drifted = SimWorld(
        accepted={**DEFAULT_WORLD.accepted, "code": {"mtp": 0.5, "ddtree": 0.3}},  # ddtree now 0.65x on code
        cost=DEFAULT_WORLD.cost,
    )
    decisions = [run_request(router, drifted, "code", rng)[0] for _ in range(60)]
    settled = [d.engine for d in decisions[-30:] if d.reason == "monitor"]
    assert settled and set(settled) == {"mtp"}, decisions[-30:]
    assert policy.monitor.ewma_alpha == 0.01  # the default this test exercises


def test_switch_margin_keeps_the_incumbent_on_near_ties(tmp_path):
    path = tmp_path / "policy.yaml"

    def set_ddtree_speedup(speedup: float) -> None:
        # mtp's seed on code is (1 + 0.55) / 1.15 = 1.348x; ddtree cost 1.0 => speedup = 1 + accepted
        path.write_text(
            "exploration: {kind: none}\nmonitor: {switch_margin: 0.05}\nstate: {path: null}\n"
            f"priors:\n  code:\n    ddtree: {{accepted: {speedup - 1.0}, cost: 1.0}}\n"
        )

    set_ddtree_speedup(1.2)
    router = AdaptiveRouter(PolicyStore(path), Monitor(None), ("raw", "mtp", "ddtree"), LabelFromUserText())
    assert router.choose(_request()).engine == "mtp"
    set_ddtree_speedup(1.348 * 1.03)  # 3% better: inside the 5% margin
    assert router.reload().ok
    assert router.choose(_request()).engine == "mtp"
    set_ddtree_speedup(1.348 * 1.08)  # 8% better: switch
    assert router.reload().ok
    assert router.choose(_request()).engine == "ddtree"
    set_ddtree_speedup(1.348 / 1.03)  # now 3% worse than mtp, but ddtree is the incumbent
    assert router.reload().ok
    assert router.choose(_request()).engine == "ddtree"
    set_ddtree_speedup(1.348 / 1.08)
    assert router.reload().ok
    assert router.choose(_request()).engine == "mtp"


def test_greedy_and_sampled_statistics_are_kept_apart():
    """Sampled decoding accepts less than greedy (the target leaves the draft's argmax path), so a
    class can prefer ddtree greedy and mtp sampled; the monitor keeps both arms and the router
    routes each request by its own mode."""
    router = _router(NO_EXPLORE)
    greedy_req = _request("code")
    sampled_req = RouteRequest(RequestText(user="code"), None, 100, 0, sampled=True)
    for _ in range(200):
        for req, ddtree_accepted, mtp_accepted in ((greedy_req, 4, 1), (sampled_req, 0, 1)):
            for engine, accepted, drafted in (("raw", 0, 0), ("mtp", mtp_accepted, 1), ("ddtree", ddtree_accepted, 4)):
                decision = router.choose(RouteRequest(RequestText(user="code"), engine, 100, 0, sampled=req.sampled))
                assert decision.sampled == req.sampled
                seconds = {"raw": 0.010, "mtp": 0.014, "ddtree": 0.020}[engine]
                router.observe(decision, StepResult([1] * (accepted + 1), drafted, accepted, 0.0, engine))
                router.observe(decision, StepResult([1] * (accepted + 1), drafted, accepted, seconds, engine))
    assert router.choose(greedy_req).engine == "ddtree"
    assert router.choose(sampled_req).engine == "mtp"
    stats = router.stats()["classes"]["code"]
    assert stats["engines"]["ddtree"]["accepted_per_step"] > 3.5
    assert stats["sampled"]["engines"]["ddtree"]["accepted_per_step"] < 0.5


def test_switch_rule_targets_and_probing_follow_the_decision():
    """Auto picks may move to every other healthy speculative engine while probed, and to raw;
    a rule's pick only hands off to raw; a busy server's raw pick never switches."""
    router = _router({**NO_EXPLORE, "switching": {"probe_steps": 10, "probe_every": 3},
                      "rules": [{"when": {"classes": ["structured"]}, "engine": "mtp"}]})
    monitored = router.choose(_request("code"))
    rule = monitored.switch
    assert rule.probe_steps == 10 and rule.probe_every == 3
    assert set(rule.targets) == {"raw", "mtp", "ddtree"} - {monitored.engine}
    assert rule.costs["raw"] == 1.0 and set(rule.costs) == {"raw", "mtp", "ddtree"}
    ruled = router.choose(_request("structured"))
    assert ruled.reason == "rule" and ruled.switch.targets == ("raw",) and ruled.switch.probe_steps == 0
    assert router.choose(_request("code", queue_depth=10)).switch is None
    raw_router = _router({**NO_EXPLORE, "switching": {"probe_steps": 10},
                          "priors": {c: {"mtp": {"accepted": 0.0}, "ddtree": {"accepted": 0.0}}
                                     for c in ("code", "prose", "structured")}})
    raw_pick = raw_router.choose(_request("prose"))
    assert raw_pick.engine == "raw" and set(raw_pick.switch.targets) == {"mtp", "ddtree"}
    default = _router(NO_EXPLORE).choose(_request("code"))     # probing is off by default
    assert default.switch.targets == ("raw",) and default.switch.probe_steps == 0
    assert _router(NO_EXPLORE | {"priors": raw_router.store.policy.model_dump()["priors"]}).choose(
        _request("prose")).switch is None                      # raw with nothing to probe: no rule


def test_probes_teach_the_monitor_acceptance_but_probing_steps_are_not_timed():
    router = _router(NO_EXPLORE)
    decision = router.choose(_request("code", forced="raw"))
    router.observe(decision, StepResult([1], seconds=0.5, engine="raw"))  # the first step
    for _ in range(5):
        router.observe(decision, StepResult([1], seconds=9.0, engine="raw", probes={"mtp": [1.0, 0.0]},
                                            probing=True))
    snapshot = router.monitor.snapshot()
    arm = snapshot["arms"]["code/mtp"]
    assert arm["accepted_per_step"] == pytest.approx(0.5, abs=0.06) and arm["accepted_observations"] == 10
    assert arm["steps"] == 0                                   # probes are not steps of mtp
    assert router.monitor.measured_cost("mtp") == (1.0, 0)   # and carry no timing
    assert "raw" not in snapshot["engines"]                  # probing steps are not raw's cost either


def _batched_steps(router: AdaptiveRouter, rows: int, seconds: float, n: int = 20) -> None:
    decision = router.choose(_request(forced="raw"))
    for _ in range(n):
        router.observe(decision, StepResult(tokens=[1], seconds=seconds, engine="raw", batch_rows=rows))


def test_under_load_the_engine_with_the_cheapest_tokens_for_the_worker_wins():
    # alone ddtree is fastest: 4 tokens for 1.5 raw steps
    router = _router(DDTREE_PRIORS)
    assert router.choose(_request()).engine == "ddtree"
    # with company a raw token costs c(B+1) - c(B) (prior slope 0.15 < 1.5 / 4): the batch wins
    decision = router.choose(_request(concurrent=1))
    assert (decision.engine, decision.reason) == ("raw", "load")
    # a batch that costs almost a full step per extra row loses to the tree again
    dear = _router({**DDTREE_PRIORS, "batching": {"prior_row_cost": 0.9}})
    assert dear.choose(_request(concurrent=3)).engine == "ddtree"
    off = _router({**DDTREE_PRIORS, "batching": {"enabled": False}})
    assert off.choose(_request(concurrent=3)).engine == "ddtree"
    # forced engines and operator rules are served as asked under load too
    assert router.choose(_request(forced="mtp", concurrent=3)).engine == "mtp"


def test_batch_costs_are_learned_per_batch_size_and_never_decrease():
    router = _router({**DDTREE_PRIORS, "batching": {"cost_warmup": 4}})
    _batched_steps(router, 1, 0.010)   # raw alone: 10 ms a step
    _batched_steps(router, 2, 0.019)   # two rows: 1.9 steps (no batching gain) ...
    _batched_steps(router, 3, 0.012)   # ... three rows measured cheaper than two: clipped up to 1.9
    costs = router.monitor.batch_costs(0.15, 4, 4)
    assert costs[0] == 1.0 and costs[1] == pytest.approx(1.9) and costs[2] == pytest.approx(1.9)
    assert costs[3] == pytest.approx(1.9)   # 4 rows unmeasured: the prior 1.45 is clipped up too
    # the learned batch makes a second row cost 0.9 raw steps: ddtree's 1.5 / 4 = 0.375 is cheaper
    assert router.choose(_request(concurrent=1)).engine == "ddtree"
    # batched steps do not pollute raw's own step time
    assert router.monitor.measured_cost("ddtree") == (1.0, 0)
    snapshot = router.monitor.snapshot()
    assert snapshot["engines"]["raw"]["seconds_per_step"] == pytest.approx(0.010)
    assert snapshot["batches"]["2"]["cost_ratio"] == pytest.approx(1.9)


def test_a_speculative_request_under_load_may_hand_over_to_the_batch():
    decision = _router(DDTREE_PRIORS).choose(_request())
    rule = decision.switch
    assert decision.engine == "ddtree" and rule is not None and "raw" in rule.targets
    assert len(rule.batch_costs) == 16 and rule.batch_costs[1] == pytest.approx(1.15)
    alone, busy = rule, rule.batched(3)
    assert alone.threshold("ddtree", "raw") == pytest.approx(rule.threshold("ddtree", "raw"))
    # raw at 0.15 of a step: ddtree must accept far more to stay (break-even 1.5 / 0.15 - 1 = 9)
    assert busy.break_even("ddtree", "raw") == pytest.approx(1.5 / 0.15 - 1)
    assert busy.threshold("ddtree", "raw") > 3.0 > alone.threshold("ddtree", "raw")


def test_an_engine_whose_prior_is_wrong_here_is_tried_and_then_wins():
    # a demo-like machine: the drafter accepts 2.3 per verify on prose where the shipped priors (from
    # real models) say 0.4; Thompson sampling from a confident prior of 0.7x raw never tests it
    from bench.router_sim import SimWorld, simulate

    world = SimWorld(accepted={c: {"mtp": 0.9, "ddtree": 2.3} for c in ("code", "prose", "structured")},
                     cost={"mtp": 1.5, "ddtree": 2.4})   # ddtree 1.38x, mtp 1.27x in every class
    for seed in (0, 1):
        trying = simulate(Policy.model_validate({}), world, requests_per_class=60, burn_in=20, seed=seed)
        assert trying["prose"].accuracy >= 0.8, (seed, trying["prose"])
        assert trying["prose"].regret_fraction < 0.07, (seed, trying["prose"])
        trapped = simulate(Policy.model_validate({"exploration": {"try_untested": False}}), world,
                           requests_per_class=60, burn_in=20, seed=seed)
        assert trapped["prose"].accuracy == 0.0   # the trap this avoids: prose never leaves mtp
        # ... and pays about the whole gap, 1 - 1.27 / 1.38 = 8 % (more where noise hides it further)
        assert trapped["prose"].regret_fraction > 0.075


def test_untested_arms_are_tried_only_after_the_predicted_best_is_measured():
    router = _router()
    first = router.choose(_request("prose"))
    assert (first.engine, first.reason) == ("mtp", "monitor")   # the priors' best is measured first
    for _ in range(50):   # monitor.warmup verifies of mtp on prose
        router.observe(first, StepResult(tokens=[1, 2], drafted=1, accepted=1, seconds=0.01, engine="mtp"))
    second = router.choose(_request("prose"))
    assert (second.engine, second.reason) == ("ddtree", "explore")
    off = _router({"exploration": {"try_untested": False}})
    decision = off.choose(_request("prose"))
    for _ in range(50):
        off.observe(decision, StepResult(tokens=[1, 2], drafted=1, accepted=1, seconds=0.01, engine="mtp"))
    assert off.choose(_request("prose")).engine == "mtp"


def test_the_policy_sets_the_monitor_weights_at_start_and_on_reload(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("monitor: {ewma_alpha: 0.02, cost_ewma_alpha: 0.004}\n")
    monitor = Monitor(None)
    router = AdaptiveRouter(PolicyStore(path), monitor, ("raw", "mtp", "ddtree"), LabelFromUserText())
    assert (monitor.snapshot()["ewma_alpha"], monitor.snapshot()["cost_ewma_alpha"]) == (0.02, 0.004)
    path.write_text("monitor: {ewma_alpha: 0.05}\n")
    assert router.reload().ok
    assert (monitor.snapshot()["ewma_alpha"], monitor.snapshot()["cost_ewma_alpha"]) == (0.05, 0.003)   # the default


def test_the_router_cuts_windows_learns_their_persistence_and_hands_it_to_the_rule():
    """Each request's verifies are cut into consecutive fallback windows per running engine; their
    pairs teach the monitor how much of a dip lasts (per engine and decoding mode), and the next
    request's rule projects with it. A forced request teaches it too (it is the same engine)."""
    policy = {**NO_EXPLORE, "fallback": {"window": 4, "persistence_warmup": 20}}
    router = _router(policy)
    rng = random.Random(1)
    for _ in range(40):
        decision = router.choose(_request(forced="ddtree"))
        for _ in range(16):   # 4 windows; each verify accepts 0..4 at random around the same level
            accepted = rng.choice((0, 1, 2, 3, 4))
            router.observe(decision, StepResult([1] * (accepted + 1), drafted=4, accepted=accepted, seconds=0.02,
                                                engine="ddtree"))
        router.finished(decision, None)
    pairs = router.monitor.snapshot()["persistence"]["ddtree"]
    assert pairs["pairs"] == 40 * 3 and pairs["persistence"] < 0.3      # windows independent: ~0
    rule = router.choose(_request()).switch
    assert rule.persistence["ddtree"] == pytest.approx(pairs["persistence"])
    assert rule.expected["ddtree"] == pytest.approx(router.predict("code", "ddtree", router.store.policy, False).accepted)
    sampled = dataclasses.replace(_request(), sampled=True)
    assert router.choose(sampled).switch.persistence["ddtree"] == 0.5   # sampled: not measured, the prior
    face_value = _router({**policy, "fallback": {**policy["fallback"], "persistence_prior": 1.0}})
    assert face_value.choose(sampled).switch.persistence["ddtree"] == 1.0
    assert not router._windows   # finished() let go of every request's window
