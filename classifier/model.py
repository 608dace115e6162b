"""The shipped classifier: a linear model over `features.featurize`, persisted as JSON + npz.

No pickle: `model.json` holds the label order, the feature spec (hash sizes, n-gram orders, block
weights, structural scaling) and the calibration temperature; `weights.npz` holds the coefficient
matrix and intercepts. Inference is plain numpy: one sparse feature row, a gather-dot with the
coefficients, softmax(beta * scores) — exactly what the fitted sklearn pipeline computes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from classifier import glossary, lexicon
from classifier.continuation import continuation
from classifier.features import FeatureSpec, featurize
from classifier.follow_up import follow_up
from classifier.tool_offer import offers_tools, the_ask
from contracts.errors import ModelLoadError
from contracts.names import CLASSES as LABELS
from contracts.names import forces_structured
from contracts.request_text import RequestText

MODEL_DIR = Path(__file__).resolve().parent / "model"
FORMAT = "switchyard-classifier/1"


@dataclass(frozen=True)
class Prediction:
    label: str
    probs: dict[str, float]
    # "model", or the rule that decided: "response_format", "tools", "tool_catalogue", "continuation",
    # "follow_up"
    reason: str = "model"

    @property
    def confidence(self) -> float:
        """Probability of the predicted label (the calibrated max probability)."""
        return max(self.probs.values())

    def uncertain(self, threshold: float) -> bool:
        """True when the class should not be trusted: the caller falls back to class-free evidence."""
        return self.confidence < threshold

    def to_json(self) -> dict:
        return {"label": self.label, "probs": self.probs}


@dataclass(frozen=True)
class LinearModel:
    """Everything inference needs, as plain arrays (what gets saved)."""

    labels: tuple[str, ...]
    spec: FeatureSpec
    coef_t: np.ndarray  # (n_features, n_classes): row gather per active feature is contiguous
    intercept: np.ndarray  # (n_classes,)
    beta: float  # inverse temperature of the calibration
    info: dict

    def probabilities(self, request: RequestText) -> np.ndarray:
        indices, values = featurize(request, self.spec)
        scores = values @ self.coef_t.take(indices, axis=0) + self.intercept  # take: ~4x faster than [indices]
        scaled = self.beta * scores
        scaled -= np.maximum.reduce(scaled)  # the ufunc: ndarray.max goes through a Python wrapper
        exp = np.exp(scaled)
        return exp / exp.sum()

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": FORMAT,
            "labels": list(self.labels),
            "beta": self.beta,
            "feature_spec": self.spec.to_json(),
            "info": self.info,
        }
        (directory / "model.json").write_text(json.dumps(meta, indent=2) + "\n")
        np.savez_compressed(directory / "weights.npz", coef=self.coef_t.T, intercept=self.intercept)

    @classmethod
    def load(cls, directory: Path) -> "LinearModel":
        try:
            meta = json.loads((directory / "model.json").read_text())
            with np.load(directory / "weights.npz", allow_pickle=False) as arrays:
                coef, intercept = arrays["coef"], arrays["intercept"]
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"cannot read classifier model in {directory}: {exc}") from exc
        if meta.get("format") != FORMAT:
            raise ModelLoadError(f"{directory}/model.json: unknown format {meta.get('format')!r} (want {FORMAT})")
        spec = FeatureSpec.from_json(meta["feature_spec"])
        if spec.lexicon_dim:
            lexicon.for_digest(spec.lexicon_digest)  # the word vectors it was fitted with (ModelLoadError if not)
        if spec.glossary not in (0, glossary.VERSION):
            raise ModelLoadError(f"{directory}: fitted with glossary v{spec.glossary}; this code has v{glossary.VERSION}")
        labels = tuple(meta["labels"])
        if coef.shape != (len(labels), spec.n_features) or intercept.shape != (len(labels),):
            raise ModelLoadError(f"{directory}: weights shape {coef.shape} does not match the feature spec")
        return cls(labels, spec, np.ascontiguousarray(coef.T), intercept, float(meta["beta"]), meta.get("info", {}))


# where tools are offered the reply is a call unless the ask alone is surely for code ("implement this
# handler": p 0.89-1.00 on the check sets); short everyday asks read as code up to 0.78 ("Clean the
# kitchen and the hall on max, then send it back to the dock": 0.67), and those are calls
SURE_CODE = 0.85


class Classifier:
    """Public API the router uses: code / prose / structured with calibrated probabilities."""

    def __init__(self, model: LinearModel):
        if set(model.labels) != set(LABELS):
            raise ModelLoadError(f"classifier labels {model.labels} differ from {LABELS}")
        self.model = model
        self._order = [model.labels.index(label) for label in LABELS]

    @classmethod
    def load(cls, path: str | Path | None = None) -> "Classifier":
        """Load a saved model directory; None loads the model shipped in classifier/model/."""
        return cls(LinearModel.load(Path(path) if path is not None else MODEL_DIR))

    def predict(self, request: RequestText) -> Prediction:
        if forces_structured(request.response_format):
            return Prediction("structured", _certain("structured"), "response_format")
        if offers_tools(request):
            ask = self._model_says(the_ask(request))
            if ask.probs["code"] < SURE_CODE:
                return Prediction("structured", _certain("structured"), "tools" if request.tools else "tool_catalogue")
            # an ask surely for code about the tools: what the model reads in it is the answer (the
            # catalogue around it only adds brackets, and a second pass over the whole request would
            # double an agent's classify time)
            return ask
        kind = follow_up(request)   # "continue", "make it shorter": the previous reply's kind
        if kind is not None:
            return Prediction(kind, _certain(kind), "follow_up")
        said = self._model_says(request)
        # an unfinished program or JSON value: the reply goes on with it (programs the model reads as
        # code already need no second look)
        continued = continuation(request, programs=said.label != "code")
        if continued is not None and continued != said.label:
            return Prediction(continued, _certain(continued), "continuation")
        return said

    def _model_says(self, request: RequestText) -> Prediction:
        probs = self.model.probabilities(request)[self._order]
        best = int(probs.argmax())
        return Prediction(LABELS[best], {label: float(p) for label, p in zip(LABELS, probs)})


def _certain(label: str) -> dict[str, float]:
    return {name: float(name == label) for name in LABELS}
