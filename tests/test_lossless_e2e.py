"""Sampled losslessness end to end: tokens from the engines' own generate loops (prefill, first
token, pipelined and host cycles, head / drafter state, rng streams), each checked against the
target's exact processed distribution given the history the engine actually produced.

For every generated token x_t, with p_t the processed target distribution after prompt + x_<t (one
causal forward over the whole sequence): r_t = log p_t(x_t) + H(p_t) has conditional mean 0, and the
randomized PIT U_t (tokens in descending-probability order) is Uniform(0, 1), exactly when each
token is a draw from p_t. Both are martingale sums, so their z-scores are ~N(0, 1) under losslessness
whatever the histories are; a token outside p_t's support is a failure by itself. The component
tests (tests/test_mtp.py, tests/test_ddtree.py) check the verify rules on their own; this one checks
the loops around them.
"""

from __future__ import annotations

import math
import mlx.core as mx
import numpy as np
import pytest

import engines.mtp
from contracts.sampling import SamplingParams
from engines import kernels
from engines.ddtree import DDTreeEngine
from engines.dflash import load_drafter
from engines.mtp import MTPEngine
from engines.mtp_head import load_mtp_head
from engines.sampling import SamplerConfig, log_probs
from engines.speculative import ChainVerdict
from tests.engine_helpers import PROMPTS, encode, run_engine

T, TOP_P, TOP_K = 0.8, 0.9, 12
SEQUENCES, TOKENS = 24, 32
Z_LIMIT = 4.5   # per statistic, P(|z| > 4.5) ~ 7e-6 under losslessness


def _statistics(bundle, engine, seed0: int) -> tuple[int, float, float]:
    """(tokens outside the target's support, z of mean r_t, z of mean U_t) over SEQUENCES x TOKENS."""
    cfg = SamplerConfig(temperature=T, top_p=TOP_P, top_k=TOP_K, min_p=0.0)
    pit_rng = np.random.RandomState(seed0)
    r, u, off = [], [], 0
    for i in range(SEQUENCES):
        prompt = encode(bundle, PROMPTS[i % len(PROMPTS)])
        tokens, _ = run_engine(engine, prompt, TOKENS,
                               SamplingParams(temperature=T, top_p=TOP_P, top_k=TOP_K, seed=seed0 + i))
        ids = mx.array(prompt + tokens, dtype=mx.uint32)[None]
        logits = bundle.model(ids, cache=bundle.make_cache())[0, len(prompt) - 1: len(prompt) - 1 + TOKENS]
        lp = np.array(log_probs(logits.astype(mx.float32), cfg), dtype=np.float64)
        for row, x in zip(lp, tokens):
            if not np.isfinite(row[x]):
                off += 1
                continue
            p = np.exp(row)
            keep = p > 0
            r.append(row[x] - float(np.sum(p[keep] * row[keep])))
            order = np.lexsort((np.arange(len(p)), -p))
            rank = int(np.nonzero(order == x)[0][0])
            u.append(float(p[order[:rank]].sum()) + pit_rng.rand() * p[x])
    r_arr, u_arr = np.array(r), np.array(u)
    z_r = r_arr.mean() / (r_arr.std() / math.sqrt(len(r_arr)))
    z_u = (u_arr.mean() - 0.5) / math.sqrt(1.0 / 12.0 / len(u_arr))
    return off, float(z_r), float(z_u)


# MTP's host and pipelined cycles draw the same tokens (same rng order); DDTree's do not, so it runs both
@pytest.mark.parametrize("which,pipelined", [("mtp-random", True), ("mtp-agree", False), ("ddtree", True),
                                             ("ddtree", False)])
def test_sampled_engines_draw_from_the_target(which, pipelined, tiny_bundle, tiny_agree_bundle, tiny_agree_drafter):
    """random head: mostly the residual path; agree head / drafter: mostly accepted drafts."""
    if which == "ddtree":
        bundle = tiny_agree_bundle
        engine = DDTreeEngine(bundle, load_drafter(tiny_agree_drafter, bundle), budget=4)
    else:
        bundle = tiny_bundle if which == "mtp-random" else tiny_agree_bundle
        engine = MTPEngine(bundle, load_mtp_head(bundle))
    with kernels.using(pipelined=pipelined):
        off, z_r, z_u = _statistics(bundle, engine, seed0=1000)
    assert off == 0
    assert abs(z_r) < Z_LIMIT and abs(z_u) < Z_LIMIT, (z_r, z_u)


def test_negative_control_always_accept_fails(tiny_bundle, monkeypatch):
    """A verify that accepts every draft (the random head's q is far from p) must fail the check. (The
    statistics catch draws outside p and draws shifted toward less or more likely tokens, the bias a
    wrong q or p in the verify makes; a bias that keeps E[log p] and the rank profile, such as a
    rejection resampled from p instead of the residual, is left to the component tests.)"""

    def accept_all(draft, draft_dist, target_logits, cfg, rng):
        following = log_probs(target_logits[..., 1, :], cfg)
        return ChainVerdict(mx.ones(draft.shape, dtype=mx.bool_), rng.categorical(following))

    monkeypatch.setattr(engines.mtp, "verify_one", accept_all)
    engine = MTPEngine(tiny_bundle, load_mtp_head(tiny_bundle))
    off, z_r, z_u = _statistics(tiny_bundle, engine, seed0=1000)
    assert off > 0 or abs(z_r) > 2 * Z_LIMIT or abs(z_u) > 2 * Z_LIMIT, (off, z_r, z_u)
