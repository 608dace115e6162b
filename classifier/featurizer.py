"""scikit-learn wrapper around `features.featurize`, used for training only (inference is numpy)."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin

from classifier.features import FeatureSpec, featurize, primary_text, structural_raw
from contracts.request_text import RequestText


class RequestFeaturizer(TransformerMixin, BaseEstimator):
    """RequestText objects -> sparse feature rows. Fitting only learns the structural scaling."""

    def __init__(self, spec: FeatureSpec | None = None):
        self.spec = spec

    def fit(self, requests: Sequence[RequestText], y=None) -> "RequestFeaturizer":
        base = (self.spec or FeatureSpec()).with_lexicon()
        raw = np.stack([structural_raw(primary_text(r)) for r in requests])
        scale = raw.std(axis=0)
        scale[scale < 1e-6] = 1.0  # a constant feature stays zero after centring
        self.spec_ = replace(base, struct_mean=tuple(raw.mean(axis=0).tolist()), struct_scale=tuple(scale.tolist()))
        return self

    def transform(self, requests: Sequence[RequestText]) -> sp.csr_matrix:
        rows = [featurize(r, self.spec_) for r in requests]
        indptr = np.concatenate(([0], np.cumsum([len(idx) for idx, _ in rows])))
        indices = np.concatenate([idx for idx, _ in rows]) if rows else np.empty(0, dtype=np.int64)
        data = np.concatenate([val for _, val in rows]) if rows else np.empty(0)
        return sp.csr_matrix((data, indices, indptr), shape=(len(rows), self.spec_.n_features))
