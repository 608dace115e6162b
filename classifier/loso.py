"""Leave-one-source-out (LOSO) evaluation: how the classifier carries over to unseen prompt styles.

For each real source S (classifier/data/real_prompts.jsonl): fit on the generated template set
plus every *other* real source, predict S. A source is written by other people for another
purpose, so this measures generalisation to a style the model never saw, which a random or
template-grouped split of one generator cannot.

Per-source macro-F1 averages F1 over the classes that have at least MIN_SUPPORT prompts in that
source (a source with 2 code prompts would otherwise swing its macro-F1 by 0.3 on one prompt);
predictions of the other classes still count as errors, lowering recall of the supported ones.
`pooled` is macro-F1 over all held-out predictions together (every class well supported).

`python -m classifier.loso [--json] [--only SOURCE ...]` (also `switchyard classifier loso`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence

import numpy as np
from sklearn.metrics import accuracy_score, f1_score

from classifier.dataset_io import DEFAULT_DATASET, REAL_DATASET, LabelledSet, load_split
from contracts.names import CLASSES as LABELS

MIN_SUPPORT = 5
# The template set's own copies of bigcode-eval prompts (VerilogEval, few-shot) are real prompts
# that also form a real source: kept out of the template base so no fold trains on its test set.
REAL_IN_TEMPLATE_SET = ("nvidia-bigcode-eval:",)


def template_base(path=DEFAULT_DATASET) -> LabelledSet:
    data = load_split("all", path)
    return data.subset([not s.startswith(REAL_IN_TEMPLATE_SET) for s in data.sources])


def source_scores(truth: Sequence[str], predicted: Sequence[str]) -> dict:
    counts = Counter(truth)
    supported = [label for label in LABELS if counts[label] >= MIN_SUPPORT]
    return {
        "n": len(truth),
        "counts": {label: counts[label] for label in LABELS},
        "accuracy": float(accuracy_score(truth, predicted)),
        "macro_f1": float(f1_score(truth, predicted, labels=supported, average="macro", zero_division=0)),
        "classes_scored": supported,
    }


def run(only: Sequence[str] = (), base: LabelledSet | None = None, real: LabelledSet | None = None,
        **fit_options) -> dict:  # fmt: skip
    from classifier.train import fit_fold, predict_labels

    base = base if base is not None else template_base()
    real = real if real is not None else load_split("all", REAL_DATASET)
    names = sorted(set(real.sources))
    per_source: dict[str, dict] = {}
    all_truth: list[str] = []
    all_predicted: list[str] = []
    for name in names:
        if only and name not in only:
            continue
        held = [s == name for s in real.sources]
        model = fit_fold(base + real.subset([not h for h in held]), **fit_options)
        test = real.subset(held)
        predicted = predict_labels(model, test)
        per_source[name] = source_scores(test.labels, predicted)
        all_truth += test.labels
        all_predicted += predicted
        print(f"  {name}: macro-F1 {per_source[name]['macro_f1']:.3f}", file=sys.stderr, flush=True)
    f1s = [row["macro_f1"] for row in per_source.values()]
    worst = min(per_source, key=lambda n: per_source[n]["macro_f1"])
    return {
        "per_source": per_source,
        "mean_macro_f1": float(np.mean(f1s)),
        "worst_source": worst,
        "worst_macro_f1": per_source[worst]["macro_f1"],
        "pooled": source_scores(all_truth, all_predicted),
        "min_support": MIN_SUPPORT,
    }


def markdown_table(result: dict) -> str:
    lines = ["| held-out source | n | code / prose / structured | accuracy | macro-F1 |", "|---|---|---|---|---|"]
    for name, row in result["per_source"].items():
        counts = " / ".join(str(row["counts"][label]) for label in LABELS)
        lines.append(f"| {name} | {row['n']} | {counts} | {row['accuracy']:.3f} | {row['macro_f1']:.3f} |")
    pooled = result["pooled"]
    lines.append(f"| **mean over sources** | | | | **{result['mean_macro_f1']:.3f}** |")
    lines.append(f"| **worst** ({result['worst_source']}) | | | | **{result['worst_macro_f1']:.3f}** |")
    lines.append(
        f"| pooled (all held-out predictions) | {pooled['n']} | | {pooled['accuracy']:.3f} | {pooled['macro_f1']:.3f} |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="leave-one-source-out evaluation")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", nargs="*", default=(), help="evaluate only these held-out sources")
    args = parser.parse_args(argv)
    result = run(args.only)
    print(json.dumps(result, indent=2) if args.json else markdown_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
