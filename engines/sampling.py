"""The one sampler: temperature, top-k, top-p, min-p and seeded draws.

Every engine and every verify rule goes through `log_probs`, so the draft distribution q and the
target distribution p always carry the same truncation (docs/design.md "Sampling and losslessness").
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import mlx.core as mx

from contracts.errors import InvalidRequestError
from contracts.sampling import SamplingParams

from .bundle import GenerationDefaults


@dataclass(frozen=True)
class SamplerConfig:
    """Fully resolved sampling settings (no None)."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def resolve(params: SamplingParams, defaults: GenerationDefaults) -> SamplerConfig:
    def pick(value, default):
        return default if value is None else value

    cfg = SamplerConfig(
        temperature=float(pick(params.temperature, defaults.temperature)),
        top_p=float(pick(params.top_p, defaults.top_p)),
        top_k=int(pick(params.top_k, defaults.top_k)),
        min_p=float(pick(params.min_p, defaults.min_p)),
    )
    if cfg.temperature < 0:
        raise InvalidRequestError("temperature must be >= 0", param="temperature")
    if not 0.0 < cfg.top_p <= 1.0:
        raise InvalidRequestError("top_p must be in (0, 1]", param="top_p")
    if cfg.top_k < 0:
        raise InvalidRequestError("top_k must be >= 0 (0 disables it)", param="top_k")
    if not 0.0 <= cfg.min_p < 1.0:
        raise InvalidRequestError("min_p must be in [0, 1)", param="min_p")
    return cfg


def log_probs(logits: mx.array, cfg: SamplerConfig) -> mx.array:
    """Normalised log-probabilities after temperature and truncation (-inf outside the support).

    Works on any leading shape (..., V). Order: temperature, top-k, top-p (over the renormalised
    top-k distribution), min-p.
    Not for greedy configs: greedy decoding uses argmax of the raw logits.
    """
    x = logits.astype(mx.float32) / cfg.temperature
    x = x - mx.logsumexp(x, axis=-1, keepdims=True)
    vocab = x.shape[-1]
    neg_inf = mx.array(-float("inf"), dtype=mx.float32)
    if 0 < cfg.top_k < vocab:
        kth = mx.min(mx.topk(x, cfg.top_k, axis=-1), axis=-1, keepdims=True)
        x = mx.where(x >= kth, x, neg_inf)
        x = x - mx.logsumexp(x, axis=-1, keepdims=True)  # top-p then measures the top-k mass (as HF/vLLM)
    if cfg.top_p < 1.0:
        ordered = -mx.sort(-x, axis=-1)
        probs = mx.exp(ordered)
        before = mx.cumsum(probs, axis=-1) - probs
        threshold = mx.min(mx.where(before < cfg.top_p, ordered, mx.inf), axis=-1, keepdims=True)
        x = mx.where(x >= threshold, x, neg_inf)
    if cfg.min_p > 0.0:
        top = mx.max(x, axis=-1, keepdims=True)
        x = mx.where(x >= top + math.log(cfg.min_p), x, neg_inf)
    return x - mx.logsumexp(x, axis=-1, keepdims=True)


def probs(logits: mx.array, cfg: SamplerConfig) -> mx.array:
    return mx.exp(log_probs(logits, cfg))


class Rng:
    """A request's random stream: seeded requests are reproducible, others draw a fresh seed."""

    def __init__(self, seed: int | None):
        self._key = mx.random.key(seed if seed is not None else random.SystemRandom().randrange(2**63))

    def next_key(self) -> mx.array:
        self._key, sub = mx.random.split(self._key)
        return sub

    def categorical(self, logprobs: mx.array) -> mx.array:
        return mx.random.categorical(logprobs, key=self.next_key())

    def uniform(self, shape: tuple[int, ...] = ()) -> mx.array:
        return mx.random.uniform(shape=shape, key=self.next_key())


def choose(logits: mx.array, cfg: SamplerConfig, rng: Rng) -> mx.array:
    """One token per row: argmax when greedy, else a draw from the processed distribution."""
    if cfg.greedy:
        return mx.argmax(logits, axis=-1)
    return rng.categorical(log_probs(logits, cfg))
