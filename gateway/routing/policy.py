"""The routing policy: a YAML file validated by pydantic (unknown keys are errors everywhere).

A Policy is immutable; live reload (gateway/policy_watch.py) swaps whole snapshots, so a request
keeps the snapshot it was admitted with. deploy/policy.example.yaml documents every field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contracts.names import ENGINE_NAMES, RESPONSE_FORMATS

ClassName = Literal["code", "prose", "structured"]
EngineName = Literal["raw", "mtp", "ddtree"]
ResponseFormat = Literal[RESPONSE_FORMATS]  # type: ignore[valid-type]
# Statistics pooled over every class (the monitor's engine-level arms), used for uncertain classes.
POOLED_CLASS = "all"
SPECULATIVE_ENGINES: tuple[str, ...] = tuple(e for e in ENGINE_NAMES if e != "raw")


class PolicyError(ValueError):
    """A policy file could not be read or is invalid; `errors` lists one line per problem."""

    def __init__(self, source: str, errors: list[str]):
        super().__init__(f"invalid policy {source}: " + "; ".join(errors))
        self.source = source
        self.errors = errors


# Seeds (docs/design.md): MTP-K1 1.2-1.4x on most content; DDTree-b4 +10% on code, -30% on prose.
# Mean accepted draft tokens per verify step; with the default costs (mtp 1.15, ddtree 2.0) these
# give speedups mtp 1.35 / 1.22 / 1.39 and ddtree 1.10 / 0.70 / 1.30 for code / prose / structured.
DEFAULT_ACCEPTED: dict[str, dict[str, float]] = {
    "code": {"mtp": 0.55, "ddtree": 1.2},
    "prose": {"mtp": 0.4, "ddtree": 0.4},
    "structured": {"mtp": 0.6, "ddtree": 1.6},
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RawOptions(_Strict):
    enabled: Literal[True] = True  # raw is the floor every fallback lands on: it cannot be disabled
    prior_tokens_per_second: float = Field(37.0, gt=0)


class MtpOptions(_Strict):
    enabled: bool = True
    prior_cost: float = Field(1.15, gt=0)


class DDTreeOptions(_Strict):
    enabled: bool = True
    budget: int = Field(4, ge=1, le=64)
    prior_cost: float = Field(2.0, gt=0)


class EnginesPolicy(_Strict):
    raw: RawOptions = RawOptions()
    mtp: MtpOptions = MtpOptions()
    ddtree: DDTreeOptions = DDTreeOptions()

    def enabled(self) -> tuple[str, ...]:
        return tuple(name for name in ENGINE_NAMES if getattr(self, name).enabled)

    def prior_cost(self, engine: str) -> float:
        return 1.0 if engine == "raw" else getattr(self, engine).prior_cost


class Prior(_Strict):
    accepted: float | None = Field(None, ge=0)  # mean accepted draft tokens per verify step; None = seed
    cost: float | None = Field(None, gt=0)      # step cost relative to a raw step; None = engine's prior_cost


class MonitorPolicy(_Strict):
    ewma_alpha: float = Field(0.01, gt=0, le=1)  # per verify step: remembers ~200 steps
    # Step seconds (the cost ratios): a machine's speed drifts by 10-30 % over minutes (the H200's
    # raw step ran 2.3 ms for a while, then 3.3 ms), alike for every engine, but each engine is timed
    # only while it runs: remembering ~200 steps compared one engine's slow minute with another's fast
    # one. Remembers ~670 steps; a ratio of two machine properties changes rarely.
    cost_ewma_alpha: float = Field(0.003, gt=0, le=1)
    warmup: int = Field(50, ge=0)
    # A step's cost is a property of this machine, measured directly: a few timed steps pin it, and a
    # wrong prior_cost (it differs several-fold between machines) must not steer many requests.
    cost_warmup: int = Field(8, ge=0)
    switch_margin: float = Field(0.03, ge=0)
    # Step timing guards (Monitor.set_timing): timed steps skipped per engine and decoding mode after
    # the process starts (first cycles compile), and the multiple of the running mean at which a later
    # step counts as a stall.
    first_use_steps: int = Field(16, ge=0)
    stall_factor: float = Field(8.0, ge=1)
    # Context lengths (tokens: prompt + generated) where a new cost band starts. A verify of T rows
    # attends T times over the context where a raw step attends once, so an engine's cost ratio grows
    # with the context (demo family, this CPU: c(4) 1.47 at 256 tokens, ~2 at 1.5-4k): step seconds are
    # also kept per band, and a request is priced with its own band's ratios once they are measured
    # (until then with the ratio over all contexts). [] : one band.
    context_bands: list[int] = Field(default_factory=lambda: [1024, 4096])

    @field_validator("context_bands")
    @classmethod
    def _increasing(cls, edges: list[int]) -> list[int]:
        if any(e <= 0 for e in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
            raise ValueError("context_bands must be positive and strictly increasing")
        return edges


class ExplorationPolicy(_Strict):
    kind: Literal["none", "epsilon", "thompson"] = "thompson"
    epsilon: float = Field(0.05, ge=0, le=1)
    thompson_prior_sd: float = Field(0.5, gt=0)  # sd of alpha (tokens) while an arm has no data
    # Until a speculative engine has monitor.warmup verify steps in a (class, decoding) arm, requests there
    # go to it (after the predicted best has its own): the priors come from other machines and models, and
    # Thompson sampling almost never tests an arm whose prior is confidently low. The per-request
    # hand-off to raw bounds what a poor try costs. false: priors alone decide until exploration does.
    try_untested: bool = True


class RuleMatch(_Strict):
    classes: list[ClassName] | None = None
    response_formats: list[ResponseFormat] | None = None
    min_prompt_tokens: int | None = Field(None, ge=0)
    max_prompt_tokens: int | None = Field(None, ge=0)

    def matches(self, klass: str, prompt_tokens: int, response_format: str | None) -> bool:
        if self.classes is not None and klass not in self.classes:
            return False
        if self.response_formats is not None and (response_format or "text") not in self.response_formats:
            return False
        if self.min_prompt_tokens is not None and prompt_tokens < self.min_prompt_tokens:
            return False
        return self.max_prompt_tokens is None or prompt_tokens <= self.max_prompt_tokens


class Rule(_Strict):
    name: str = ""
    when: RuleMatch = RuleMatch()
    engine: EngineName


class FallbackPolicy(_Strict):
    enabled: bool = True
    window: int = Field(8, ge=1)
    margin: float = Field(0.1, ge=0)
    # A window's mean acceptance is noisy (an MTP step accepts 0 or 1): hand off only when it falls
    # this many standard errors below break-even, not on a run of bad luck.
    evidence_z: float = Field(1.645, ge=0)
    # A window says something about the rest of a request only as far as its dip lasts: the monitor
    # learns per engine and decoding mode how much of a window's deviation from the arm's mean the
    # next window keeps (regression of consecutive windows), and the rule projects the rest from the
    # arm's mean plus that share, growing as a dip lasts more windows (contracts.engine.SwitchRule.carry).
    # On the demo family greedy hand-offs lost (0.60-0.98x the engine kept, in all 14 bench runs with
    # any, CPU and H200) and sampled ones won (1.00-1.17x).
    persistence_warmup: int = Field(30, ge=1)
    # The share used until `persistence_warmup` pairs are in. 1.0 takes a first window at face value:
    # early greedy hand-offs after one bad window then lost 9 % of an H200 run. Every share measured in
    # the stored bench runs is below 1 (0.21-0.84, median ~0.57); 0.5 discounts a single window by
    # half and still hands a collapse (0.75 -> 0.05 tokens a verify) to raw within ~4 windows.
    persistence_prior: float = Field(0.5, ge=0.0, le=1.0)


class SwitchingPolicy(_Strict):
    """Per-request switching beyond the hand-off to raw: for the first `probe_steps` steps of an
    auto-routed request, every other enabled speculative engine is kept in sync and its acceptance
    probed on the tokens the request produces; the fallback section's evidence rule (window, margin,
    evidence_z) then decides whether the request moves to it (raw -> spec, mtp <-> ddtree)."""

    # Off by default: on the 2-core CPU with the demo family the probes' extra drafter/head forwards
    # cost more than the switches won (BENCHMARKS.md section 0); enable where drafting is cheap.
    probe_steps: int = Field(0, ge=0)    # 0: only the hand-off to raw
    probe_every: int = Field(2, ge=1)    # steps between DDTree probes (a drafter block each) in that phase


class ClassifierPolicy(_Strict):
    """How far the router trusts the request classifier's label."""

    # Below this calibrated max probability the class is "uncertain": the request is routed, and its
    # steps are learned, on engine-level statistics pooled over all classes, so a likely-wrong label
    # neither picks the engine nor pollutes that class's acceptance. 0 trusts every label.
    uncertain_below: float = Field(0.6, ge=0, le=1)


class QueuePolicy(_Strict):
    raw_above_depth: int = Field(4, ge=0)


class BatchingPolicy(_Strict):
    """Load-aware routing (docs/design.md "Concurrency"): while other requests run, raw decoding shares
    one batched forward, so a raw token costs the worker only c(B+1) - c(B) raw steps; a request then
    goes to whichever engine makes its tokens cheapest for the worker, and a running speculative
    request hands over to the batch on the same evidence."""

    enabled: bool = True
    # c(B) = 1 + prior_row_cost * (B - 1) until the monitor has timed batched steps of B rows
    prior_row_cost: float = Field(0.15, ge=0, le=1)
    cost_warmup: int = Field(8, ge=0)     # timed steps of a batch size before its measured cost replaces the prior
    max_rows: int = Field(16, ge=2, le=256)   # most rows per batched step (also capped by serve --max-batch)
    # Latency SLO: a waiting request starts only while every decoding stream's time per token, measured
    # by the worker and predicted for one more stream from c(B), stays under this; the rest wait in
    # the queue, priority first. At least one request always runs, and a running one is never stopped.
    # None: off (serve --max-batch alone limits).
    max_token_latency_ms: float | None = Field(None, gt=0)
    # Requests of at least this priority start even while the SLO holds others back (up to --max-batch):
    # an interactive client need not wait for a long agent run to end. None: the SLO holds back everyone.
    slo_exempt_priority: int | None = Field(None, ge=-1000, le=1000)


class StatePolicy(_Strict):
    path: str | None = "~/.switchyard/router_state.json"
    persist_interval_seconds: float = Field(30.0, gt=0)

    def resolved_path(self) -> Path | None:
        return None if self.path is None else Path(self.path).expanduser()


class Policy(_Strict):
    version: Literal[1] = 1
    default_class: ClassName = "prose"
    engines: EnginesPolicy = EnginesPolicy()
    priors: dict[ClassName, dict[EngineName, Prior]] = Field(default_factory=dict)
    monitor: MonitorPolicy = MonitorPolicy()
    exploration: ExplorationPolicy = ExplorationPolicy()
    rules: list[Rule] = Field(default_factory=list)
    fallback: FallbackPolicy = FallbackPolicy()
    switching: SwitchingPolicy = SwitchingPolicy()
    classifier: ClassifierPolicy = ClassifierPolicy()
    queue: QueuePolicy = QueuePolicy()
    batching: BatchingPolicy = BatchingPolicy()
    quarantine_seconds: float = Field(60.0, ge=0)
    state: StatePolicy = StatePolicy()

    @model_validator(mode="after")
    def _rules_target_enabled_engines(self) -> "Policy":
        enabled = self.engines.enabled()
        for index, rule in enumerate(self.rules):
            if rule.engine not in enabled:
                raise ValueError(f"rules[{index}] targets engine {rule.engine!r}, which is disabled under engines:")
        return self

    def prior(self, klass: str, engine: str) -> tuple[float, float]:
        """(alpha, cost) priors for one arm; raw is (0, 1) by definition."""
        if engine == "raw":
            return 0.0, 1.0
        if klass == POOLED_CLASS:  # the pooled arm starts from the classes' average belief
            pairs = [self.prior(c, engine) for c in DEFAULT_ACCEPTED]
            return sum(a for a, _ in pairs) / len(pairs), sum(c for _, c in pairs) / len(pairs)
        given = self.priors.get(klass, {}).get(engine, Prior())  # type: ignore[call-overload]
        accepted = given.accepted if given.accepted is not None else DEFAULT_ACCEPTED[klass][engine]
        cost = given.cost if given.cost is not None else self.engines.prior_cost(engine)
        return accepted, cost


def _format_validation_errors(error: ValidationError) -> list[str]:
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"{where}: {item['msg']}")
    return lines


def parse_policy(text: str, source: str = "<string>") -> Policy:
    """Parse YAML text into a Policy; raises PolicyError listing every problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(source, ["YAML: " + " ".join(str(exc).split())]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(source, [f"(top level): expected a mapping, got {type(data).__name__}"])
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(source, _format_validation_errors(exc)) from None


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file; raises PolicyError (also for unreadable files)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(str(path), [f"cannot read: {exc}"]) from None
    return parse_policy(text, str(path))
