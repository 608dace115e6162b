"""Router convergence simulation: simulated engines of known acceptance and cost per class.

Each simulated request runs to completion on the chosen engine: a prefill step, then verify steps
whose accepted draft count is Binomial(max_draft, alpha_r / max_draft) with a per-request alpha_r
around the class's true alpha, and whose wall time is raw_step_seconds x cost x lognormal noise.
The oracle knows the true speedups (1 + alpha) / cost. Reported: how often the router picks the
oracle's engine (non-explore decisions, after a burn-in) and the cumulative regret, i.e. decode
seconds spent beyond what the oracle would have spent.

    PYTHONPATH=. python bench/router_sim.py --requests 600 --seed 1
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass, field

from contracts.engine import StepResult
from contracts.names import CLASSES
from contracts.request_text import RequestText
from gateway.routing.interface import RouteRequest
from gateway.routing.monitor import Monitor
from gateway.routing.policy import Policy
from gateway.routing.policy_watch import PolicyStore
from gateway.routing.router import AdaptiveRouter

MAX_DRAFT = {"raw": 0, "mtp": 1, "ddtree": 4}


@dataclass(frozen=True)
class SimWorld:
    """True mean accepted draft tokens per verify step (class x engine) and step cost per engine."""

    accepted: dict[str, dict[str, float]]
    cost: dict[str, float]
    raw_step_seconds: float = 0.027
    noise_sd: float = 0.1
    completion_tokens: int = 64

    def speedup(self, klass: str, engine: str) -> float:
        if engine == "raw":
            return 1.0
        return (1.0 + self.accepted[klass][engine]) / self.cost[engine]

    def oracle(self, klass: str, engines: tuple[str, ...]) -> str:
        return max(engines, key=lambda e: self.speedup(klass, e))


# code: ddtree best; prose: raw best; structured: mtp best. The default policy priors (seeds from
# docs/design.md) prefer mtp everywhere, so two of three classes must be learned against the priors.
DEFAULT_WORLD = SimWorld(
    accepted={
        "code": {"mtp": 0.5, "ddtree": 1.9},        # mtp 1.25x, ddtree 1.45x
        "prose": {"mtp": 0.12, "ddtree": 0.5},      # mtp 0.93x, ddtree 0.75x
        "structured": {"mtp": 0.85, "ddtree": 1.7},  # mtp 1.54x, ddtree 1.35x
    },
    cost={"mtp": 1.2, "ddtree": 2.0},
)


@dataclass
class ClassResult:
    requests: int = 0
    judged: int = 0          # non-explore decisions after the burn-in
    judged_correct: int = 0
    explore: int = 0
    seconds: float = 0.0     # decode seconds spent (excluding prefill)
    oracle_seconds: float = 0.0
    chosen: dict[str, int] = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        return self.judged_correct / self.judged if self.judged else float("nan")

    @property
    def regret_seconds(self) -> float:
        return self.seconds - self.oracle_seconds

    @property
    def regret_fraction(self) -> float:
        return self.regret_seconds / self.oracle_seconds if self.oracle_seconds else float("nan")


def run_request(router: AdaptiveRouter, world: SimWorld, klass: str, rng: random.Random, queue_depth: int = 0):
    """Route one request of class `klass` (the fake classifier reads the class from user_text)."""
    request = RouteRequest(RequestText(user=klass), None, 200, queue_depth)
    decision = router.choose(request)
    engine = decision.engine
    true_alpha = 0.0 if engine == "raw" else world.accepted[klass][engine]
    request_alpha = min(MAX_DRAFT[engine], max(0.0, true_alpha * rng.uniform(0.7, 1.3)))
    cost = 1.0 if engine == "raw" else world.cost[engine]
    prefill = StepResult(tokens=[1], seconds=0.2, engine=engine)
    router.observe(decision, prefill)
    emitted, seconds = 1, 0.0
    while emitted < world.completion_tokens:
        drafted = MAX_DRAFT[engine]
        p = request_alpha / drafted if drafted else 0.0
        accepted = sum(rng.random() < p for _ in range(drafted))
        step_seconds = world.raw_step_seconds * cost * math.exp(rng.gauss(0.0, world.noise_sd))
        router.observe(decision, StepResult([7] * (1 + accepted), drafted, accepted, step_seconds, engine))
        emitted += 1 + accepted
        seconds += step_seconds
    router.finished(decision, None)
    oracle = world.oracle(klass, tuple(decision.predicted) or ("raw",))
    oracle_seconds = (emitted - 1) * world.raw_step_seconds / world.speedup(klass, oracle)
    return decision, seconds, oracle_seconds


class LabelFromUserText:
    """Fake classifier for the simulation: the user text is the class label."""

    @dataclass
    class _Prediction:
        label: str
        probs: dict[str, float]

    def predict(self, request: RequestText):
        return self._Prediction(request.user, {c: float(c == request.user) for c in CLASSES})


class NoisyLabels:
    """Fake classifier that mislabels a share of requests, as a real one does on unfamiliar styles.

    A wrong label is given with a max probability drawn from `wrong_confidence`, a right one from
    `right_confidence` (a calibrated classifier is mostly, not always, less sure when wrong: the
    ranges overlap, so some wrong labels are confident and some right ones are not).
    """

    def __init__(self, error_rate: float = 0.4, seed: int = 0,
                 right_confidence: tuple[float, float] = (0.5, 1.0),
                 wrong_confidence: tuple[float, float] = (0.34, 0.7)):  # fmt: skip
        self.error_rate = error_rate
        self.right_confidence = right_confidence
        self.wrong_confidence = wrong_confidence
        self._rng = random.Random(seed)
        self.mislabelled = 0

    def predict(self, request: RequestText):
        truth = request.user
        wrong = self._rng.random() < self.error_rate
        label = self._rng.choice([c for c in CLASSES if c != truth]) if wrong else truth
        self.mislabelled += wrong
        top = self._rng.uniform(*(self.wrong_confidence if wrong else self.right_confidence))
        rest = (1.0 - top) / (len(CLASSES) - 1)
        return LabelFromUserText._Prediction(label, {c: top if c == label else rest for c in CLASSES})


def simulate(
    policy: Policy, world: SimWorld = DEFAULT_WORLD, requests_per_class: int = 300, burn_in: int = 100, seed: int = 0,
    monitor: Monitor | None = None, classifier=None,
) -> dict[str, ClassResult]:
    """`classifier`: LabelFromUserText (always right) unless given; results are keyed by the TRUE class."""
    rng = random.Random(seed)
    router = AdaptiveRouter(
        PolicyStore(policy=policy), monitor or Monitor(None, policy.monitor.ewma_alpha),
        ("raw", "mtp", "ddtree"), classifier or LabelFromUserText(), rng=random.Random(seed + 1),
    )
    results = {klass: ClassResult() for klass in CLASSES}
    order = [klass for klass in CLASSES for _ in range(requests_per_class)]
    rng.shuffle(order)
    for klass in order:
        decision, seconds, oracle_seconds = run_request(router, world, klass, rng)
        result = results[klass]
        result.requests += 1
        result.seconds += seconds
        result.oracle_seconds += oracle_seconds
        result.chosen[decision.engine] = result.chosen.get(decision.engine, 0) + 1
        if decision.reason == "explore":
            result.explore += 1
        elif result.requests > burn_in:
            result.judged += 1
            result.judged_correct += decision.engine == world.oracle(klass, tuple(decision.predicted))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="requests per class")
    parser.add_argument("--burn-in", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ewma-alpha", type=float, default=0.01)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--exploration", choices=("epsilon", "thompson", "none"), default="thompson")
    args = parser.parse_args()
    policy = Policy.model_validate({"exploration": {"kind": args.exploration}, "monitor": {"ewma_alpha": args.ewma_alpha, "warmup": args.warmup}})
    results = simulate(policy, requests_per_class=args.requests, burn_in=args.burn_in, seed=args.seed)
    print(f"{'class':<11} {'oracle':<7} {'picked best':>11} {'explore':>7} {'regret s':>9} {'regret %':>8}  chosen")
    for klass, r in results.items():
        oracle = DEFAULT_WORLD.oracle(klass, ("raw", "mtp", "ddtree"))
        print(
            f"{klass:<11} {oracle:<7} {r.accuracy:>10.1%} {r.explore:>7d} {r.regret_seconds:>9.2f} "
            f"{r.regret_fraction:>8.1%}  {r.chosen}"
        )


if __name__ == "__main__":
    main()
