"""The hand-off replay (bench/handoff_replay.py): its counterfactual times, its estimator of a dip's
lasting share and its rule constants match the router's."""

from __future__ import annotations

import random

import pytest

from bench.handoff_replay import (EVIDENCE_Z, MARGIN, PRIOR, WINDOW, Trace, replay, routing_bounds,
                                  seconds, window_persistence)
from gateway.routing.policy import FallbackPolicy


def test_the_replay_uses_the_policy_defaults():
    policy = FallbackPolicy()
    assert (WINDOW, MARGIN, EVIDENCE_Z, PRIOR) == (policy.window, policy.margin, policy.evidence_z,
                                                   policy.persistence_prior)


def test_a_hand_off_costs_the_verifies_so_far_and_a_raw_step_per_token_left():
    trace = Trace("code", "ddtree", "greedy", (3, 3, 0, 0))      # 4 + 4 + 1 + 1 = 10 tokens
    assert seconds(trace, 2.0, None) == 8.0                        # four verifies at 2 raw steps
    assert seconds(trace, 2.0, 1) == 2 * 2.0 + 2                   # two verifies, then 2 tokens on raw
    assert seconds(trace, 2.0, 3) == 8.0                           # handed off after the last: nothing left


def test_the_lasting_share_separates_request_levels_from_window_noise():
    rng = random.Random(0)
    steady = [Trace("code", "ddtree", "greedy", tuple(rng.choice((0, 4)) for _ in range(64))) for _ in range(40)]
    levels = [Trace("code", "ddtree", "greedy", (level,) * 64) for level in (0, 1, 2, 3, 4) * 8]
    assert window_persistence(steady) < 0.2          # every request alike: a window's dip is noise
    assert window_persistence(levels) == pytest.approx(1.0)   # each request keeps its own level


def test_a_collapsing_request_is_handed_off_and_a_healthy_one_is_not():
    healthy = [Trace("code", "ddtree", "greedy", (3, 2, 4, 3) * 16) for _ in range(8)]
    collapsed = [Trace("code", "ddtree", "greedy", (3, 2, 4, 3) * 2 + (0,) * 56)]
    rows = replay(healthy + collapsed, {"ddtree": 2.25})
    (row,) = rows
    blind = "prior 0.5, last window"   # a share below 1 on the last window alone never sees the collapse
    for name, result in row["variants"].items():
        assert result["hand_offs"] == (0 if name == blind else 1), name   # the collapsed one only
        assert result["vs_never"] == 1.0 if name == blind else result["vs_never"] > 1.0, name   # it pays
    assert row["oracle_vs_never"] > 1.0


def test_routing_bounds_price_every_engine_per_class_and_per_request():
    # code: ddtree accepts 3 a verify (4 tokens for 2 raw steps), mtp 1 (2 tokens for 1.5): ddtree wins;
    # prose: ddtree accepts 0 (1 token for 2), mtp 1: mtp wins; the second prose prompt favours ddtree
    traces = [Trace("code", "ddtree", "greedy", (3,) * 4), Trace("code", "mtp", "greedy", (1,) * 8),
              Trace("prose", "ddtree", "greedy", (0,) * 16), Trace("prose", "mtp", "greedy", (1,) * 8),
              Trace("prose", "ddtree", "greedy", (3,) * 4), Trace("prose", "mtp", "greedy", (0,) * 16)]
    (row,) = routing_bounds(traces, {"ddtree": 2.0, "mtp": 1.5})
    # raw steps for 16 tokens a prompt (raw 16): code ddtree 8, mtp 12; prose #1 ddtree 32, mtp 12;
    # prose #2 ddtree 8, mtp 24. Every fixed engine takes 48 for the 48 tokens
    assert row["fixed"] == pytest.approx({"raw": 1.0, "ddtree": 1.0, "mtp": 1.0})
    assert row["classes"]["code"] == pytest.approx({"raw": 1.0, "ddtree": 2.0, "mtp": 16 / 12, "oracle": 2.0})
    assert row["classes"]["prose"] == pytest.approx({"raw": 1.0, "ddtree": 32 / 40, "mtp": 32 / 36,
                                                     "oracle": 32 / 20})
    assert row["per_class_vs_best"] == pytest.approx(48 / (8 + 32))       # code on ddtree, prose on raw
    assert row["per_request_vs_best"] == pytest.approx(48 / (8 + 12 + 8))
