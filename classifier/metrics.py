"""Held-out metrics: accuracy, macro-F1, confusion matrix, and calibration (ECE, Brier)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score


def expected_calibration_error(probs: np.ndarray, truth: np.ndarray, bins: int = 10) -> float:
    """Top-label ECE: |accuracy - confidence| averaged over equal-width confidence bins."""
    confidence = probs.max(axis=1)
    correct = probs.argmax(axis=1) == truth
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1]), 0, bins - 1)
    ece = 0.0
    for b in range(bins):
        mask = which == b
        if mask.any():
            ece += mask.mean() * abs(correct[mask].mean() - confidence[mask].mean())
    return float(ece)


def brier_score(probs: np.ndarray, truth: np.ndarray) -> float:
    """Multi-class Brier score: mean squared distance between probabilities and the one-hot truth."""
    onehot = np.eye(probs.shape[1])[truth]
    return float(((probs - onehot) ** 2).sum(axis=1).mean())


def report(labels: Sequence[str], truth: Sequence[str], probs: np.ndarray) -> dict:
    """probs columns follow `labels`."""
    truth_index = np.array([labels.index(t) for t in truth])
    predicted = [labels[i] for i in probs.argmax(axis=1)]
    return {
        "n": len(truth),
        "accuracy": float(accuracy_score(truth, predicted)),
        "macro_f1": float(f1_score(truth, predicted, labels=list(labels), average="macro")),
        "confusion_matrix": {
            "labels": list(labels),
            "rows_true_cols_predicted": confusion_matrix(truth, predicted, labels=list(labels)).tolist(),
        },
        "ece": expected_calibration_error(probs, truth_index),
        "brier": brier_score(probs, truth_index),
    }
