"""Mid-request switching: a speculative engine whose acceptance collapses hands the rest of the
request to raw on the same target caches; a request probes the other engines and moves to one that
would pay; every switch keeps the output identical to raw's."""

from __future__ import annotations

import pytest

from contracts.engine import CancelToken, SwitchRule
from contracts.sampling import SamplingParams
from engines.ddtree import DDTreeEngine
from engines.dflash import load_drafter
from engines.mtp import MTPEngine
from engines.mtp_head import load_mtp_head
from engines.raw import RawEngine
from engines.runtime import load_runtime
from tests.engine_helpers import PROMPTS, encode, run_engine

GREEDY = SamplingParams(temperature=0.0)


def to_raw(window: int, min_accepted: float) -> SwitchRule:
    """Hand off to raw when a window's mean acceptance falls below `min_accepted` (no margin, no noise)."""
    cost = 1.0 + min_accepted
    return SwitchRule(window=window, margin=0.0, evidence_z=0.0, costs={"mtp": cost, "ddtree": cost})


RULE = to_raw(4, 0.5)
HEALTHY_RULE = to_raw(8, 0.15)


def _engines(kind, bundle, drafter_dir):
    if kind == "mtp":
        return MTPEngine(bundle, load_mtp_head(bundle))
    return DDTreeEngine(bundle, load_drafter(drafter_dir, bundle), budget=4)


def test_threshold_is_break_even_minus_margin_and_noise():
    rule = SwitchRule(window=8, margin=0.1, evidence_z=2.0, costs={"mtp": 1.5, "ddtree": 2.0},
                      step_sd={"mtp": 0.4, "ddtree": 1.0})
    assert rule.threshold("mtp", "raw") == pytest.approx(0.5 - 0.1 - 2.0 * 0.4 / 8**0.5)
    # mtp against a ddtree probed at 2.0 accepted: ddtree decodes 3 tokens per 2 raw steps = 1.5 per step
    scale = 1.5 / 2.0
    want = 1.5 * 3.0 / 2.0 - 1.0 - 0.1 - 2.0 * ((0.4**2 + (scale * 1.0) ** 2) / 8) ** 0.5
    assert rule.threshold("mtp", "ddtree", 2.0) == pytest.approx(want)
    # raw against a probed engine: raw accepts nothing, exactly
    assert rule.threshold("raw", "mtp", 0.8) == pytest.approx(1.8 / 1.5 - 1 - 0.1 - 2.0 * (0.4 / 1.5) / 8**0.5)


@pytest.mark.parametrize("kind", ["mtp", "ddtree"])
def test_collapse_hands_off_to_raw_losslessly(kind, tiny_bundle, tiny_drafter):
    """Random head/drafter: acceptance collapses, the engine switches to raw after one window."""
    engine = _engines(kind, tiny_bundle, tiny_drafter)
    raw = RawEngine(tiny_bundle)
    for text in PROMPTS[:4]:
        ids = encode(tiny_bundle, text)
        want, _ = run_engine(raw, ids, 48, GREEDY)
        got, steps = run_engine(engine, ids, 48, GREEDY, switch=RULE)
        assert got == want
        engines = [s.engine for s in steps]
        assert engines[-1] == "raw", engines
        first_raw = engines.index("raw")
        speculative = [s for s in steps[:first_raw] if s.drafted]
        assert len(speculative) == RULE.window             # tripped exactly when the window filled
        assert sum(s.accepted for s in speculative) / RULE.window < 0.5
        assert all(e == "raw" for e in engines[first_raw:])  # no flapping back


@pytest.mark.parametrize("kind", ["mtp", "ddtree"])
def test_triggers_only_when_a_window_falls_below(kind, tiny_agree_bundle, tiny_agree_drafter):
    """Agreeing head/drafter: run each prompt without a rule, then with one. The hand-off happens
    iff some full window of the rule-less run falls below the threshold; healthy runs never switch."""
    engine = _engines(kind, tiny_agree_bundle, tiny_agree_drafter)
    healthy = collapsed = 0
    for text in PROMPTS[:10]:
        ids = encode(tiny_agree_bundle, text)
        _, free = run_engine(engine, ids, 48, GREEDY)
        accepted = [s.accepted for s in free if s.drafted]
        w = HEALTHY_RULE.window
        window_means = [sum(accepted[i : i + w]) / w for i in range(len(accepted) - w + 1)]
        _, ruled = run_engine(engine, ids, 48, GREEDY, switch=HEALTHY_RULE)
        switched = any(s.engine == "raw" for s in ruled)
        should_switch = any(m < 0.15 - 1e-9 for m in window_means)
        assert switched == should_switch, (text, window_means)
        healthy += not should_switch
        collapsed += should_switch
    assert healthy > 0  # the "does not trigger when acceptance is healthy" case was exercised


def test_runtime_passes_the_rule(tiny_target, tiny_drafter):
    runtime = load_runtime(tiny_target, draft_dir=tiny_drafter)
    ids = runtime.encode_prompt(PROMPTS[0])
    params = SamplingParams(temperature=0.0, max_tokens=32)
    raw_text = "".join(c.text for c in runtime.generate(ids, params, "raw", CancelToken()))
    chunks = list(runtime.generate(ids, params, "mtp", CancelToken(), switch=RULE))
    assert "".join(c.text for c in chunks) == raw_text
    assert any(c.step is not None and c.step.engine == "raw" for c in chunks)
    assert chunks[-1].finish_reason in ("length", "stop")
