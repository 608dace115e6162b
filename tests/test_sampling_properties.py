"""Property tests (hypothesis) of the sampler and the chain verify rule, computed exactly (no sampling).

engines.sampling.log_probs: normalised; never empty; top-k / top-p / min-p keep what they should;
lower temperature is sharper. engines.speculative.verify_one: a draft d ~ q is accepted with
probability exactly min(1, p(d)/q(d)); on rejection the replacement comes from normalize(max(p-q, 0));
together the emitted token has distribution p. The verify's randomness is scripted (a fixed uniform
and recorded categorical calls), so the probabilities are read off the rule itself.
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engines.sampling import Candidates, SamplerConfig, candidates, log_probs
from engines.speculative import verify_one

SETTINGS = settings(max_examples=150, deadline=None)
EPS = 1e-5

# Logits on a 1/64 grid: exactly representable in float32, so ties are real ties (not denormal noise).
grid_logit = st.integers(-320, 320).map(lambda i: i / 64)
vocab_logits = st.integers(2, 10).flatmap(lambda v: st.lists(grid_logit, min_size=v, max_size=v))
temperatures = st.floats(0.5, 2.0)


def probs_of(logits: list[float], cfg: SamplerConfig) -> np.ndarray:
    return np.exp(np.array(log_probs(mx.array(logits, dtype=mx.float32), cfg), dtype=np.float64))


def tempered(logits: list[float], temperature: float) -> np.ndarray:
    x = np.array(logits, dtype=np.float64) / temperature
    e = np.exp(x - x.max())
    return e / e.sum()


def plain(temperature: float) -> SamplerConfig:
    return SamplerConfig(temperature=temperature, top_p=1.0, top_k=0, min_p=0.0)


@SETTINGS
@given(vocab_logits, temperatures, st.integers(0, 12), st.floats(0.05, 1.0) | st.just(0.0), st.floats(0.0, 0.95))
def test_log_probs_are_normalised_and_keep_the_argmax(logits, temperature, top_k, top_p, min_p):
    cfg = SamplerConfig(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p)
    lp = np.array(log_probs(mx.array(logits, dtype=mx.float32), cfg), dtype=np.float64)
    p = np.exp(lp)
    assert abs(p.sum() - 1.0) < EPS
    assert np.all(lp[np.isfinite(lp)] <= 1e-6) and not np.any(np.isnan(lp))
    assert p[int(np.argmax(logits))] > 0          # the most likely token always survives


@SETTINGS
@given(vocab_logits, temperatures, st.integers(1, 12))
def test_top_k_keeps_at_most_the_k_largest(logits, temperature, k):
    p = probs_of(logits, SamplerConfig(temperature=temperature, top_p=1.0, top_k=k, min_p=0.0))
    ordered = sorted(logits, reverse=True)
    kth = ordered[min(k, len(logits)) - 1]
    kept = p > 0
    assert all(logits[i] >= kth for i in np.flatnonzero(kept))
    assert all(kept[i] for i, x in enumerate(logits) if x > kth)     # everything strictly above is kept
    if len(set(logits)) == len(logits):
        assert kept.sum() == min(k, len(logits))
    # renormalised: the kept tokens keep their relative odds
    full = tempered(logits, temperature)
    assert np.allclose(p[kept], full[kept] / full[kept].sum(), atol=1e-5)


@SETTINGS
@given(vocab_logits, temperatures, st.floats(0.05, 0.999))
def test_top_p_keeps_the_smallest_nucleus(logits, temperature, top_p):
    p = probs_of(logits, SamplerConfig(temperature=temperature, top_p=top_p, top_k=0, min_p=0.0))
    full = tempered(logits, temperature)
    kept = p > 0
    # a prefix of the tokens by probability
    assert full[kept].min() >= full[~kept].max() - 1e-6 if (~kept).any() else True
    # enough mass ...
    assert full[kept].sum() >= top_p - 1e-5
    # ... and minimal: without its least likely tokens the nucleus would fall short
    smallest = full[kept].min()
    without = full[kept & (full > smallest + 1e-6)].sum()
    assert without < top_p + 1e-5


@SETTINGS
@given(vocab_logits, temperatures, st.floats(0.01, 0.95))
def test_min_p_drops_exactly_the_tokens_below_min_p_times_the_max(logits, temperature, min_p):
    p = probs_of(logits, SamplerConfig(temperature=temperature, top_p=1.0, top_k=0, min_p=min_p))
    full = tempered(logits, temperature)
    threshold = min_p * full.max()
    clear = np.abs(full - threshold) > 1e-5 * full.max()   # float32 cannot decide ties at the threshold
    assert np.array_equal((p > 0)[clear], (full >= threshold)[clear])
    assert np.allclose(p[p > 0], full[p > 0] / full[p > 0].sum(), atol=1e-5)


@SETTINGS
@given(vocab_logits, temperatures, temperatures)
def test_lower_temperature_is_sharper(logits, t1, t2):
    assume(abs(t1 - t2) > 1e-3)
    low, high = sorted((t1, t2))
    p_low, p_high = probs_of(logits, plain(low)), probs_of(logits, plain(high))

    def entropy(p: np.ndarray) -> float:
        return float(-(p[p > 0] * np.log(p[p > 0])).sum())

    assert entropy(p_low) <= entropy(p_high) + 1e-5
    assert p_low.max() >= p_high.max() - 1e-6
    # temperature never reorders tokens
    order = np.argsort(logits, kind="stable")
    assert np.all(np.diff(p_low[order]) >= -1e-6) and np.all(np.diff(p_high[order]) >= -1e-6)


@SETTINGS
@given(vocab_logits, temperatures, st.integers(1, 12), st.integers(1, 12))
def test_truncation_is_monotone_in_k(logits, temperature, k1, k2):
    small, large = sorted((k1, k2))
    kept_small = probs_of(logits, SamplerConfig(temperature, 1.0, small, 0.0)) > 0
    kept_large = probs_of(logits, SamplerConfig(temperature, 1.0, large, 0.0)) > 0
    assert np.all(kept_large[kept_small])


# ---- chain verify -------------------------------------------------------------------------------


class ScriptedRng:
    """Stands in for engines.sampling.Rng: uniform() returns `u`; categorical() records the
    distribution it was asked to sample from and returns its most likely token."""

    def __init__(self, u: float, vocab: int = 0):
        self.u, self.vocab = u, vocab
        self.asked: list[np.ndarray] = []

    def uniform(self, shape=()):
        return mx.full(shape, self.u, dtype=mx.float32)

    def categorical(self, logprobs: mx.array) -> mx.array:
        self.asked.append(np.exp(np.array(logprobs, dtype=np.float64)))
        return mx.argmax(logprobs, axis=-1)

    def sample(self, dist: Candidates) -> mx.array:
        """Records the distribution over the whole vocabulary (the candidates scattered back)."""
        vocab = self.vocab if dist.tokens is not None else dist.logprobs.shape[-1]
        self.asked.append(np.exp(np.array(dist.dense(vocab), dtype=np.float64)))
        return dist.token_at(mx.argmax(dist.logprobs, axis=-1))


def _verify(draft: int, q: Candidates, target: mx.array, cfg: SamplerConfig, u: float) -> tuple[bool, ScriptedRng]:
    rng = ScriptedRng(u, target.shape[-1])
    verdict = verify_one(mx.array(draft), q, target, cfg, rng)
    return bool(verdict.accepted.item()), rng


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 6).flatmap(lambda v: st.tuples(
    st.lists(grid_logit, min_size=v, max_size=v),
    st.lists(grid_logit, min_size=v, max_size=v),
    st.lists(grid_logit, min_size=v, max_size=v),
)), temperatures, st.integers(0, 6), st.floats(0.3, 1.0) | st.just(0.0))   # 0: the top token alone
def test_chain_verify_accepts_with_min_1_p_over_q_and_emits_p(vectors, temperature, top_k, top_p):
    draft_logits, target_now, target_next = vectors
    cfg = SamplerConfig(temperature=temperature, top_p=top_p, top_k=top_k, min_p=0.0)
    q_dist = candidates(mx.array(draft_logits, dtype=mx.float32), cfg)
    q_lp = q_dist.dense(len(draft_logits))
    target = mx.array([target_now, target_next], dtype=mx.float32)
    q = np.exp(np.array(q_lp, dtype=np.float64))
    p = np.exp(np.array(log_probs(target[0], cfg), dtype=np.float64))
    p_next = np.exp(np.array(log_probs(target[1], cfg), dtype=np.float64))

    emitted = np.zeros_like(p)
    for d in np.flatnonzero(q > 0):   # only tokens the drafter can propose
        accept = min(1.0, p[d] / q[d])
        # the acceptance threshold of the rule is exactly min(1, p/q): just below accepts, just above rejects
        if accept > 1e-6:
            accepted, rng = _verify(int(d), q_dist, target, cfg, u=accept * (1 - 1e-3))
            assert accepted
            assert np.allclose(rng.asked[1], p_next, atol=1e-6)   # the bonus after an accept comes from p(next)
        if accept < 1 - 1e-6:
            accepted, rng = _verify(int(d), q_dist, target, cfg, u=accept * (1 + 1e-3) + 1e-9)
            assert not accepted
        _, rng = _verify(int(d), q_dist, target, cfg, u=0.5)
        residual = rng.asked[0]          # what a rejection resamples from
        emitted[d] += q[d] * accept
        emitted += q[d] * (1.0 - accept) * residual
    # lossless: the first emitted token is distributed exactly as the target's p
    assert np.allclose(emitted, p, atol=2e-5), (emitted, p)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8).flatmap(lambda v: st.tuples(
    st.lists(grid_logit, min_size=v, max_size=v, unique=True),
    st.lists(grid_logit, min_size=v, max_size=v, unique=True),
    st.integers(0, v - 1),
)))
def test_greedy_verify_accepts_iff_the_draft_is_the_argmax(data):
    now, nxt, draft = data
    cfg = SamplerConfig(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0)
    verdict = verify_one(mx.array(draft), None, mx.array([now, nxt], dtype=mx.float32), cfg, ScriptedRng(0.5))
    accepted = bool(verdict.accepted.item())
    assert accepted == (draft == int(np.argmax(now)))
    assert int(verdict.bonus.item()) == int(np.argmax(nxt) if accepted else np.argmax(now))


def test_identical_draft_and_target_always_accept():
    cfg = SamplerConfig(temperature=0.8, top_p=0.9, top_k=0, min_p=0.0)
    logits = mx.array([0.1, 2.0, -1.0, 0.7], dtype=mx.float32)
    q = candidates(logits, cfg)
    q_lp = q.dense(logits.shape[-1])
    for d in np.flatnonzero(np.exp(np.array(q_lp)) > 0):
        accepted, _ = _verify(int(d), q, mx.stack([logits, logits]), cfg, u=1.0 - 1e-7)
        assert accepted and math.isfinite(float(q_lp[int(d)]))


def test_top_p_is_measured_after_top_k():
    """HF/vLLM order: top-k first, then the nucleus of the renormalised top-k distribution."""
    import mlx.core as mx

    from engines.sampling import SamplerConfig, log_probs

    logits = mx.log(mx.array([0.4, 0.25, 0.15, 0.1, 0.1]))
    p = mx.exp(log_probs(logits, SamplerConfig(temperature=1.0, top_p=0.6, top_k=2, min_p=0.0))).tolist()
    # top-2 renormalised = [0.615, 0.385]: its 0.6-nucleus is the first token alone (measured on the
    # full distribution, 0.4 < 0.6 would have kept both)
    assert p[0] == 1.0 and sum(p[1:]) == 0.0


# ---- candidates: the columns every draw and verify works on -------------------------------------


@SETTINGS
@given(vocab_logits, temperatures, st.integers(0, 12), st.floats(0.05, 1.0), st.floats(0.0, 0.95))
def test_candidates_are_the_dense_distribution_on_its_support(logits, temperature, top_k, top_p, min_p):
    """The candidate columns hold exactly the mass of the dense form, each token once, and p at any
    token reads the same from the short lists (compare) as from the dense form."""
    cfg = SamplerConfig(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p)
    vocab = len(logits)
    dist = candidates(mx.array(logits, dtype=mx.float32), cfg)
    dense = np.exp(np.array(dist.dense(vocab), dtype=np.float64))
    if dist.tokens is not None:
        tokens = np.array(dist.tokens).tolist()
        assert len(set(tokens)) == len(tokens) == top_k
        assert dense[[t for t in range(vocab) if t not in tokens]].sum() == 0.0
    every = mx.arange(vocab)
    compare = np.array(dist.probs_at(every, vocab, dense=dist.tokens is None), dtype=np.float64)   # a short-list compare
    through_dense = np.array(dist.probs_at(every, vocab, dense=True), dtype=np.float64)           # one dense pass
    assert np.allclose(compare, dense, atol=1e-7) and np.allclose(through_dense, dense, atol=1e-7)
    for token in range(vocab):
        assert abs(float(dist.prob_of(mx.array(token), vocab).item()) - dense[token]) < 1e-7


def test_top_k_keeps_exactly_k_tokens_when_the_kth_value_ties():
    """Top-k breaks a tie at the k-th value (as torch.topk does): k tokens, the rest of the tie dropped."""
    logits = mx.array([2.0, 1.0, 1.0, 1.0, 0.0], dtype=mx.float32)
    p = np.exp(np.array(log_probs(logits, SamplerConfig(temperature=1.0, top_p=1.0, top_k=2, min_p=0.0))))
    assert p[0] > 0 and (p > 0).sum() == 2 and p[4] == 0.0 and (p[1:4] > 0).sum() == 1


def test_draws_from_candidates_follow_the_dense_distribution():
    """Rng.sample draws a candidate column and maps it to its token: the empirical distribution of
    many draws matches the dense one (top-k, top-p and plain temperature)."""
    from engines.sampling import Rng

    logits = mx.array(np.random.default_rng(3).normal(0, 1.5, 40).astype(np.float32))
    for cfg in (SamplerConfig(0.8, 0.9, 6, 0.0), SamplerConfig(1.0, 0.8, 0, 0.0), SamplerConfig(1.3, 1.0, 0, 0.05)):
        dist = candidates(logits, cfg)
        want = np.exp(np.array(dist.dense(40), dtype=np.float64))
        rows = 20000
        many = type(dist)(None if dist.tokens is None else mx.broadcast_to(dist.tokens, (rows, dist.tokens.shape[-1])),
                          mx.broadcast_to(dist.logprobs, (rows, dist.logprobs.shape[-1])))
        got = np.bincount(np.array(Rng(11).sample(many)), minlength=40) / rows
        assert np.all(got[want == 0] == 0)
        assert 0.5 * np.abs(got - want).sum() < 0.02, (cfg, got, want)
