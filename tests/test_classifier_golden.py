"""The classifier's features and probabilities are pinned: today's featurize and predict against
rows recorded from the shipped featurizer (tests/classifier_golden.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from classifier import features
from classifier.model import Classifier
from contracts.request_text import RequestText
from tests.classifier_golden import GOLDEN_PATH, cases, fingerprint

TOLERANCE = 1e-9


@pytest.fixture(scope="module")
def shipped() -> Classifier:
    return Classifier.load()


@pytest.fixture(scope="module")
def golden() -> list[dict]:
    return json.loads(GOLDEN_PATH.read_text(encoding="utf-8"))["cases"]


def test_golden_cases_are_the_recorded_requests(golden):
    assert [RequestText(**case["request"]) for case in golden] == cases()
    assert len(golden) >= 30


def test_features_match_the_golden_rows(shipped, golden):
    spec = shipped.model.spec
    for number, case in enumerate(golden):
        want = case["features"]
        got = fingerprint(*features.featurize(RequestText(**case["request"]), spec), spec, "indices" in want)
        where = f"case {number}: {case['request']['user'][:60]!r}"
        assert got["block_counts"] == want["block_counts"], where
        assert got["indices_sha256"] == want["indices_sha256"], where
        for key in ("sum", "sum_sq", "projection"):
            assert got[key] == pytest.approx(want[key], rel=TOLERANCE, abs=TOLERANCE), f"{where}: {key}"
        if "indices" in want:
            assert got["indices"] == want["indices"], where
            np.testing.assert_allclose(got["values"], want["values"], rtol=TOLERANCE, atol=TOLERANCE, err_msg=where)


def test_probabilities_and_labels_match_the_golden_rows(shipped, golden):
    for number, case in enumerate(golden):
        request = RequestText(**case["request"])
        probs = dict(zip(shipped.model.labels, shipped.model.probabilities(request).tolist()))
        for label, want in case["probabilities"].items():
            assert probs[label] == pytest.approx(want, abs=TOLERANCE), f"case {number}: {label}"
        assert shipped.predict(request).label == case["label"], f"case {number}"
