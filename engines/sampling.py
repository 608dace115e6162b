"""The one sampler: temperature, top-k, top-p, min-p and seeded draws.

Every engine and every verify rule goes through `candidates` (or its dense form `log_probs`), so the
draft distribution q and the target distribution p always carry the same truncation (docs/design.md
"Sampling and losslessness").
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
    if not 0.0 <= cfg.top_p <= 1.0:
        raise InvalidRequestError("top_p must be in [0, 1]", param="top_p")
    if cfg.top_k < 0:
        raise InvalidRequestError("top_k must be >= 0 (0 disables it)", param="top_k")
    if not 0.0 <= cfg.min_p < 1.0:
        raise InvalidRequestError("min_p must be in [0, 1)", param="min_p")
    return cfg


def log_probs(logits: mx.array, cfg: SamplerConfig) -> mx.array:
    """Normalised log-probabilities after temperature and truncation (-inf outside the support).

    Works on any leading shape (..., V): the dense form of `candidates`. Not for greedy configs:
    greedy decoding uses argmax of the raw logits.
    """
    return candidates(logits, cfg).dense(logits.shape[-1])


@dataclass(frozen=True)
class Candidates:
    """A processed distribution on the tokens that can carry mass: with top-k, the k candidate
    tokens and their normalised log-probabilities (-inf where top-p or min-p dropped one); without
    it, the whole vocabulary in id order (`tokens` is None). Draws and verify rules work on these
    columns: on a CPU each dense pass over a vocabulary costs ~0.1-0.2 ms, and a sampled verify
    made a dozen of them."""

    tokens: mx.array | None   # (..., K) token ids, or None: column i is token i
    logprobs: mx.array        # (..., K) float32

    def dense(self, vocab: int) -> mx.array:
        """(..., vocab) log-probabilities, -inf off the candidates."""
        if self.tokens is None:
            return self.logprobs
        out = mx.full((*self.tokens.shape[:-1], vocab), -float("inf"), dtype=mx.float32)
        return mx.put_along_axis(out, self.tokens.astype(mx.int32), self.logprobs, axis=-1)

    def token_at(self, column: mx.array) -> mx.array:
        """The token of a column per leading row."""
        if self.tokens is None:
            return column
        return mx.take_along_axis(self.tokens, column[..., None].astype(mx.int32), axis=-1)[..., 0]

    def probs_at(self, tokens: mx.array, vocab: int, dense: bool | None = None) -> mx.array:
        """p at each of `tokens` (..., N), 0 off the support: a compare of the two short lists, or
        one dense pass when they are long (`dense` forces one way)."""
        if dense is None:
            dense = self.tokens is None or self.tokens.shape[-1] * tokens.shape[-1] > vocab
        if not dense:
            hit = tokens.astype(self.tokens.dtype)[..., :, None] == self.tokens[..., None, :]
            return mx.sum(mx.where(hit, mx.exp(self.logprobs)[..., None, :], 0.0), axis=-1)
        return mx.take_along_axis(mx.exp(self.dense(vocab)), tokens.astype(mx.int32), axis=-1)

    def prob_of(self, token: mx.array, vocab: int) -> mx.array:
        """p(token) for one token per leading row (shape (...)), 0 off the support."""
        return self.probs_at(token[..., None], vocab)[..., 0]


def candidates(logits: mx.array, cfg: SamplerConfig) -> Candidates:
    """The processed distribution of `logits` (..., V): temperature, top-k, top-p (over the
    renormalised top-k distribution, as HF/vLLM), min-p.

    Top-k keeps exactly k tokens (a tie at the k-th value is broken by the partition, as
    torch.topk breaks it); top-p and min-p keep every token at or above their threshold value. The
    nucleus always holds the most likely token (as HF and vLLM keep one): top_p 0 is that token alone.
    """
    vocab = logits.shape[-1]
    tokens = None
    if 0 < cfg.top_k < vocab:
        # a positive temperature keeps the order, so the k largest logits are the k most likely tokens
        tokens = mx.argpartition(-logits, kth=cfg.top_k - 1, axis=-1)[..., : cfg.top_k]
        logits = mx.take_along_axis(logits, tokens, axis=-1)
    x = logits.astype(mx.float32) / cfg.temperature
    x = x - mx.logsumexp(x, axis=-1, keepdims=True)
    neg_inf = mx.array(-float("inf"), dtype=mx.float32)
    if cfg.top_p < 1.0:
        ordered = -mx.sort(-x, axis=-1)
        probs = mx.exp(ordered)
        before = mx.cumsum(probs, axis=-1) - probs
        threshold = mx.min(mx.where(before < cfg.top_p, ordered, mx.inf), axis=-1, keepdims=True)
        threshold = mx.minimum(threshold, ordered[..., :1])   # top_p 0 keeps no prefix: the top token stays
        x = mx.where(x >= threshold, x, neg_inf)
    if cfg.min_p > 0.0:
        top = mx.max(x, axis=-1, keepdims=True)
        x = mx.where(x >= top + math.log(cfg.min_p), x, neg_inf)
    return Candidates(tokens, x - mx.logsumexp(x, axis=-1, keepdims=True))


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

    def sample(self, dist: Candidates) -> mx.array:
        """One token per leading row of a processed distribution."""
        return dist.token_at(mx.random.categorical(dist.logprobs, key=self.next_key()))

    def uniform(self, shape: tuple[int, ...] = ()) -> mx.array:
        return mx.random.uniform(shape=shape, key=self.next_key())


def choose(logits: mx.array, cfg: SamplerConfig, rng: Rng) -> mx.array:
    """One token per row: argmax when greedy, else a draw from the processed distribution."""
    if cfg.greedy:
        return mx.argmax(logits, axis=-1)
    return rng.sample(candidates(logits, cfg))
