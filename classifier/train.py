"""Fit the classifier on the shipped prompt set and export it as a LinearModel (JSON + npz).

Pipeline: RequestFeaturizer (hashed char/word n-grams + structural features) -> multinomial
LogisticRegression, calibrated by temperature scaling on out-of-fold scores
(CalibratedClassifierCV, method="temperature", ensemble=False: one model fit on all training
data plus one temperature fit on grouped cross-validation predictions). Deterministic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedGroupKFold
from sklearn.pipeline import Pipeline
from threadpoolctl import threadpool_limits

from classifier.dataset_io import DEFAULT_DATASET, LabelledSet, load_split
from classifier.features import FeatureSpec
from classifier.featurizer import RequestFeaturizer
from classifier.metrics import report
from classifier.model import MODEL_DIR, LinearModel
from contracts.names import CLASSES as LABELS

REGULARISATION_C = 10.0  # picked on grouped CV over {3, 10, 30, 100}; flat between 3 and 30
CV_FOLDS = 5
SEED = 7


def fit_pipeline(train: LabelledSet, spec: FeatureSpec | None = None, c: float = REGULARISATION_C) -> Pipeline:
    folds = StratifiedGroupKFold(n_splits=CV_FOLDS, shuffle=True, random_state=SEED)
    splits = list(folds.split(np.zeros(len(train.labels)), train.labels, train.groups))
    base = LogisticRegression(C=c, max_iter=5000, tol=1e-6)
    calibrated = CalibratedClassifierCV(base, method="temperature", cv=splits, ensemble=False)
    pipeline = Pipeline([("features", RequestFeaturizer(spec)), ("model", calibrated)])
    # One thread: on a small shared box, OpenMP/BLAS threads spin against each other (13x slower).
    with threadpool_limits(limits=1):
        pipeline.fit(train.requests, train.labels)
    return pipeline


def fit_fold(train: LabelledSet, spec: FeatureSpec | None = None, c: float = REGULARISATION_C) -> Pipeline:
    """Uncalibrated fit for evaluation folds: temperature scaling cannot change the argmax."""
    pipeline = Pipeline([("features", RequestFeaturizer(spec)), ("model", LogisticRegression(C=c, max_iter=5000, tol=1e-6))])
    with threadpool_limits(limits=1):
        pipeline.fit(train.requests, train.labels)
    return pipeline


def predict_labels(pipeline: Pipeline, data: LabelledSet) -> list[str]:
    return [str(label) for label in pipeline.predict(data.requests)]


def export(pipeline: Pipeline, info: dict | None = None) -> LinearModel:
    """The fitted pipeline as plain arrays (what model.LinearModel computes with numpy)."""
    spec = pipeline.named_steps["features"].spec_
    calibrated = pipeline.named_steps["model"].calibrated_classifiers_[0]
    estimator = calibrated.estimator
    # CalibratedClassifierCV fits its estimator on encoded labels 0..k-1; map them back
    labels = tuple(str(pipeline.classes_[int(c)]) for c in estimator.classes_)
    return LinearModel(
        labels=labels,
        spec=spec,
        coef_t=np.ascontiguousarray(estimator.coef_.T.astype(np.float64)),
        intercept=estimator.intercept_.astype(np.float64),
        beta=float(np.asarray(calibrated.calibrators[0].beta_)),
        info=info or {},
    )


def pipeline_probs(pipeline: Pipeline, data: LabelledSet) -> np.ndarray:
    """Pipeline probabilities with columns in LABELS order."""
    classes = list(pipeline.classes_)
    return pipeline.predict_proba(data.requests)[:, [classes.index(label) for label in LABELS]]


def uncalibrated_probs(pipeline: Pipeline, data: LabelledSet) -> np.ndarray:
    features = pipeline.named_steps["features"].transform(data.requests)
    estimator = pipeline.named_steps["model"].calibrated_classifiers_[0].estimator
    classes = [str(pipeline.classes_[int(c)]) for c in estimator.classes_]
    return estimator.predict_proba(features)[:, [classes.index(label) for label in LABELS]]


def train_and_save(dataset: Path = DEFAULT_DATASET, out_dir: Path = MODEL_DIR) -> dict:
    train, test = load_split("train", dataset), load_split("test", dataset)
    pipeline = fit_pipeline(train)
    held_out = report(LABELS, test.labels, pipeline_probs(pipeline, test))
    raw = report(LABELS, test.labels, uncalibrated_probs(pipeline, test))
    held_out["uncalibrated_ece"], held_out["uncalibrated_brier"] = raw["ece"], raw["brier"]
    info = {
        "dataset": str(dataset.name),
        "n_train": len(train.labels),
        "n_test": len(test.labels),
        "regularisation_c": REGULARISATION_C,
        "held_out": held_out,
    }
    model = export(pipeline, info)
    model.save(out_dir)
    return info
