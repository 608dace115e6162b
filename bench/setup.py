"""Load the model ONCE for a bench run: the gateway's Runtime, plus a DFlash (budget 1) engine over
the same bundle and drafter (no second load), and a fresh adaptive router for `auto`."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path

from contracts.request_text import RequestText
from engines.checkpoint import default_model_dir
from engines.ddtree import DDTreeEngine
from engines.runtime import Runtime, default_draft_dir, load_runtime, warm_tree_layouts

log = logging.getLogger("switchyard.bench")

DFLASH = "ddtree1"   # DDTree with budget 1 = plain DFlash chain


@dataclass
class BenchModel:
    runtime: Runtime          # what the gateway serves: raw / mtp / ddtree
    timed: Runtime            # same bundle and engines plus ddtree1, for in-process timing
    model_dir: Path
    draft_dir: Path | None


def resolve_model_dir(model: str | None) -> Path:
    """--model, else the embedded default (the shipped demo family)."""
    return Path(model) if model is not None else default_model_dir()


def generated_family(directory: Path) -> Path:
    """A tiny target (with MTP head) + DFlash drafter built to agree often (engines.testing)."""
    from engines.testing.drafter import write_drafter_checkpoint
    from engines.testing.target import write_target_checkpoint

    if not (directory / "drafter" / "config.json").exists():
        target = write_target_checkpoint(directory / "target", variant="agree")
        write_drafter_checkpoint(directory / "drafter", target, variant="agree")
    return directory


def load_bench_model(model: str | None = None, draft: str | None = None, tree_budget: int = 4,
                     dtype: str | None = None) -> BenchModel:
    model_dir = resolve_model_dir(model)
    draft_dir = Path(draft) if draft is not None else default_draft_dir(model_dir)
    runtime = load_runtime(model_dir, draft_dir=draft_dir, tree_budget=tree_budget, dtype=dtype)
    engines = dict(runtime.engines)
    ddtree = engines.get("ddtree")
    if isinstance(ddtree, DDTreeEngine):
        engines[DFLASH] = warm_tree_layouts(DDTreeEngine(runtime.bundle, ddtree.drafter, budget=1))
    timed = Runtime(runtime.bundle, engines, runtime.model_id)
    return BenchModel(runtime, timed, model_dir, draft_dir)


class LabelClassifier:
    """Stand-in when the trained classifier is not in this build: the workload's own labels.
    Reported as such; it measures routing given a correct class, not the classifier."""

    name = "workload labels (oracle)"

    def __init__(self, labels: dict[str, str]):
        self.labels = labels

    def predict(self, request: RequestText):
        label = self.labels.get(request.user.strip(), "prose")
        return _Prediction(label, {k: float(k == label) for k in ("code", "prose", "structured")})


@dataclass(frozen=True)
class _Prediction:
    label: str
    probs: dict


def load_classifier(labels: dict[str, str], use_labels: bool = False):
    """(classifier, description): the shipped classifier if importable, else the labels."""
    if not use_labels:
        try:
            from classifier.model import Classifier

            return Classifier.load(), "shipped classifier (classifier.model.Classifier.load())"
        except Exception as exc:  # noqa: BLE001 - absent or not trained yet: say so in the report
            log.warning("classifier unavailable (%s); routing with the workload labels", exc)
    return LabelClassifier(labels), LabelClassifier.name


def fresh_router(engine_names, classifier, policy: str | None = None, seed: int = 0):
    """An AdaptiveRouter with an EMPTY monitor (no state file: a bench never reads or writes the
    user's learned state) and a seeded exploration RNG."""
    from gateway.routing.monitor import Monitor
    from gateway.routing.policy_watch import PolicyStore
    from gateway.routing.router import AdaptiveRouter

    store = PolicyStore(policy)
    monitor = Monitor(None, store.policy.monitor.ewma_alpha)
    return AdaptiveRouter(store, monitor, list(engine_names), classifier, rng=random.Random(seed))
