"""Per-request switching between all engines: raw -> mtp/ddtree and mtp <-> ddtree on probed
evidence, losslessly, with the probed engines' states exactly in sync with the request."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import KVCache

from contracts.engine import MIN_ROW_COST, SwitchRule
from contracts.sampling import SamplingParams
from engines.ddtree import DDTreeEngine, _Probe
from engines.dflash import load_drafter
from engines.mtp import MTPEngine
from engines.mtp_head import load_mtp_head
from engines.prefill import prefill
from engines.processing import TargetProcessor
from engines.raw import RawEngine
from engines.sampling import Rng, SamplerConfig
from engines.speculative import Prefilled, RawStepping, speculative_generate
from engines.switching import SwitchWatch
from tests.engine_helpers import PROMPTS, encode

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def engines(tiny_agree_bundle, tiny_agree_drafter):
    bundle = tiny_agree_bundle
    return bundle, {
        "mtp": MTPEngine(bundle, load_mtp_head(bundle)),
        "ddtree": DDTreeEngine(bundle, load_drafter(tiny_agree_drafter, bundle), budget=4),
    }


def favour(engine: str, targets: tuple[str, ...], **extra) -> SwitchRule:
    """A rule under which `engine` looks far faster than anything else (switch as soon as its probe
    window fills), with no margin or noise allowance."""
    costs = {"mtp": 50.0, "ddtree": 50.0, engine: 0.01}
    return SwitchRule(window=2, margin=0.0, evidence_z=0.0, costs=costs, targets=targets,
                      probe_steps=extra.pop("probe_steps", 12), **extra)


def run(bundle, engines, start, rule, n=40, params=GREEDY):
    tokens, steps = [], []
    gen = speculative_generate(bundle, engines, start, encode_prompt(bundle), params, _Cancel(), rule)
    for step in gen:
        tokens += step.tokens
        steps.append(step)
        if len(tokens) >= n:
            break
    gen.close()
    return tokens[:n], steps


class _Cancel:
    cancelled = False


_PROMPT = {}


def encode_prompt(bundle):
    return _PROMPT.setdefault(id(bundle), encode(bundle, PROMPTS[0]))


def raw_tokens(bundle, ids, n=40, params=GREEDY):
    tokens = []
    gen = RawEngine(bundle).generate(ids, params, _Cancel())
    for step in gen:
        tokens += step.tokens
        if len(tokens) >= n:
            break
    gen.close()
    return tokens[:n]


@pytest.mark.parametrize("start,goal", [("raw", "mtp"), ("raw", "ddtree"), ("mtp", "ddtree"), ("ddtree", "mtp")])
def test_switch_on_probed_evidence_is_lossless(engines, start, goal):
    bundle, loaded = engines
    targets = tuple(e for e in ("raw", "mtp", "ddtree") if e != start)
    for text in PROMPTS[:6]:
        _PROMPT[id(bundle)] = encode(bundle, text)
        want = raw_tokens(bundle, _PROMPT[id(bundle)])
        got, steps = run(bundle, loaded, start, favour(goal, targets, probe_every=1))
        assert got == want, text
        order = [s.engine for s in steps]
        assert order[0] == start and goal in order, order
        switch_at = order.index(goal)
        # the switch came once the goal's probe window (2) was full, from probes only
        probed = [a for s in steps[:switch_at] for a in s.probes.get(goal, [])]
        assert len(probed) >= 2 and all(s.probing for s in steps[1:switch_at])
        assert start not in order[switch_at:]  # never back to an engine it left
    _PROMPT.pop(id(bundle))


def test_no_switch_without_evidence_and_none_after_probing(engines):
    """A rule that favours nothing keeps the request where it is; past probe_steps the other engines
    are dropped and only raw stays reachable."""
    bundle, loaded = engines
    neutral = SwitchRule(window=4, margin=0.0, evidence_z=0.0, costs={"mtp": 1.0, "ddtree": 1.0},
                         targets=("ddtree", "raw"), probe_steps=3)
    ids = encode_prompt(bundle)
    _, steps = run(bundle, loaded, "mtp", neutral)
    assert [s.probing for s in steps[1:5]] == [True, True, True, False]
    assert all(not s.probes for s in steps[4:])
    assert set(s.engine for s in steps) <= {"mtp", "raw"}
    assert raw_tokens(bundle, ids) == run(bundle, loaded, "mtp", neutral)[0]


def test_sampled_switching_is_seeded_and_reproducible(engines):
    bundle, loaded = engines
    params = SamplingParams(temperature=1.0, top_p=0.95, top_k=20, seed=11)
    rule = favour("ddtree", ("ddtree", "raw"), probe_every=1)
    a, steps = run(bundle, loaded, "mtp", rule, params=params)
    b, _ = run(bundle, loaded, "mtp", rule, params=params)
    assert a == b and len(a) == 40
    assert any(s.probes for s in steps)
    # sampled MTP probes are acceptance probabilities, sum(min(p, q)), not hits
    rule_mtp = favour("mtp", ("mtp",), probe_steps=6)
    _, raw_steps = run(bundle, loaded, "raw", rule_mtp, params=params)
    probed = [a for s in raw_steps for a in s.probes.get("mtp", [])]
    assert probed and all(0.0 <= a <= 1.0 + 1e-5 for a in probed) and any(0.0 < a < 1.0 for a in probed)


def _request(bundle, ids, capture, cfg):
    cache = bundle.make_cache()
    out = prefill(bundle, cache, ids, capture, last_alone=True)
    first = mx.argmax(bundle.lm_head(out.hidden[-1:]), axis=-1)
    processor = TargetProcessor(SamplingParams(temperature=0.0), ids, bundle.tokenizer, bundle.vocab_size)
    return Prefilled(cache, mx.array(ids, dtype=mx.uint32), out, first, cfg, Rng(0), capture, processor)


def test_absorbed_states_equal_fresh_ones(engines):
    """Raw runs 10 steps while MTP and DDTree absorb its rows; each state must then be what a fresh
    start on the whole sequence builds: the MTP head's next draft and the drafter's next block."""
    bundle, loaded = engines
    cfg = SamplerConfig(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0)
    ids = encode_prompt(bundle)
    capture = loaded["ddtree"].capture
    request = _request(bundle, ids, capture, cfg)
    states = {name: engine.start(request) for name, engine in loaded.items()}
    raw = RawStepping(bundle, request.cache, cfg, request.rng, capture, request.processor)
    sequence, pending = list(ids), int(request.first.item())
    for _ in range(10):
        cycle = raw.cycle(pending, sync=True)
        for state in states.values():
            state.absorb(cycle.committed)
        sequence.append(pending)
        pending = cycle.emitted[-1]
    fresh = _request(bundle, sequence, capture, cfg)
    assert int(fresh.first.item()) == pending
    fresh_mtp = loaded["mtp"].start(fresh)
    assert np.allclose(np.array(states["mtp"].draft_logits), np.array(fresh_mtp.draft_logits), atol=1e-4)
    ddtree = loaded["ddtree"]
    absorbed = ddtree._propose(pending, states["ddtree"].context)
    rebuilt = ddtree._propose(pending, ddtree.start(fresh).context)
    assert np.array_equal(np.array(absorbed.top_tokens), np.array(rebuilt.top_tokens))
    assert np.allclose(np.array(absorbed.top_logprobs), np.array(rebuilt.top_logprobs), atol=1e-4)


def test_greedy_probes_are_the_acceptance_a_verify_would_give(engines):
    """MTP probe = [head's draft == the target's next token]; DDTree probe = the walk depth of the
    proposed tree over the tokens that followed, both recomputed here from scratch."""
    bundle, loaded = engines
    cfg = SamplerConfig(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0)
    ids = encode_prompt(bundle)
    capture = loaded["ddtree"].capture
    request = _request(bundle, ids, capture, cfg)
    mtp_state = loaded["mtp"].start(request)
    tree_state = loaded["ddtree"].start(request)
    raw = RawStepping(bundle, request.cache, cfg, request.rng, capture, request.processor)
    head_cache, head_rows = KVCache(), loaded["mtp"].head_rows
    sequence, pending = list(ids), int(request.first.item())
    mtp_probes, tree_probes = [], []
    for _ in range(12):
        cycle = raw.cycle(pending, sync=True)
        mtp_probes += mtp_state.absorb(cycle.committed)
        tree_probes += tree_state.absorb(cycle.committed)
        sequence.append(pending)
        pending = cycle.emitted[-1]
    sequence.append(pending)
    # MTP: the head, fed the whole sequence at once, drafts position t+2 from row t
    hidden = prefill(bundle, bundle.make_cache(), sequence).hidden
    rows = head_rows(mx.array(sequence[1:], dtype=mx.uint32), hidden[:-1], head_cache)
    drafts = np.array(mx.argmax(bundle.lm_head(rows), axis=-1))
    P = len(ids)
    want = [float(drafts[t - 2] == sequence[t]) for t in range(P + 1, len(sequence))]
    assert mtp_probes == pytest.approx(want)
    # DDTree: after absorb k a tree is proposed for pending sequence[P + k + 1] from a context of the
    # rows before it; it completes when the walk over the following tokens stops (mismatch or leaf)
    ddtree = loaded["ddtree"]
    expected = []   # (step at which the probe completes, creation order, depth)
    for k in range(12):
        start = P + k + 1
        context = ddtree.start(_request(bundle, sequence[:start], capture, cfg)).context
        tree = ddtree._draft(ddtree._propose(sequence[start], context))
        probe = _Probe(tree)
        for j, token in enumerate(sequence[start + 1 :]):
            probe.feed(token)
            if probe.done:
                expected.append((start + 1 + j, k, float(probe.depth)))
                break
    last_absorbed = P + 12   # the 12 absorbs fed the tokens up to this index
    completed = [depth for step, _, depth in sorted(expected) if step <= last_absorbed]
    assert tree_probes == completed and len(tree_probes) >= 6


def test_watch_picks_the_fastest_alternative_and_never_returns():
    rule = SwitchRule(window=2, margin=0.0, evidence_z=0.0, costs={"mtp": 1.2, "ddtree": 2.0},
                      targets=("raw", "ddtree"))
    watch = SwitchWatch(rule, "mtp")
    for accepted in (0.0, 0.0):
        watch.record(accepted)
    assert watch.choice() is None or watch.choice() == "raw"  # ddtree's window is still empty
    for depth in (4.0, 4.0):
        watch.record_probe("ddtree", depth)
    # mtp: 1 token per 1.2 raw steps; ddtree: 5 per 2: ddtree gains most
    assert watch.choice() == "ddtree"
    assert watch.choice(("raw",)) == "raw"
    watch.switched("ddtree")
    watch.record_probe("mtp", 1.0)
    watch.record_probe("mtp", 1.0)
    watch.record(0.0)
    watch.record(0.0)
    assert watch.choice() == "raw"    # mtp was left: only raw remains


def test_a_flat_learned_batch_table_prices_raw_above_zero():
    # the monitor's c(B) is only non-decreasing: here 3 rows cost what 2 do, so a 3rd row's marginal
    # cost reads 0. A speculative request running beside 2 others must still get a finite threshold
    # (this divided by zero and failed the request mid-stream) and hand over to the nearly free batch.
    rule = SwitchRule(window=2, margin=0.0, evidence_z=1.645, costs={"ddtree": 1.5},
                      targets=("raw",), batch_costs=(1.0, 1.9, 1.9, 1.9))
    busy = rule.batched(2)
    assert busy.cost("raw") == pytest.approx(MIN_ROW_COST)
    assert math.isfinite(busy.threshold("ddtree", "raw"))
    assert busy.break_even("ddtree", "raw") == pytest.approx(1.5 / MIN_ROW_COST - 1)
    watch = SwitchWatch(busy, "ddtree")
    for accepted in (4.0, 4.0):   # even a perfect tree loses to a batch row this cheap
        watch.record(accepted)
    assert watch.choice(("raw",)) == "raw"
    assert rule.batched(0).cost("raw") == 1.0   # alone, raw costs a full step


@pytest.mark.parametrize("engine", ["raw", "mtp", "ddtree"])
def test_a_steps_seconds_include_the_consumers_time_as_raw_steps_do(engines, engine):
    """The monitor divides an engine's step seconds by raw's: both must count the time the request's
    consumer holds the generator (detokenising, streaming, the router's bookkeeping). Raw decode
    always did; speculative cycles did not, which read them ~10 % cheaper than their tokens cost on
    the H200 (0.5-0.7 ms of host work per step against 3-7 ms steps)."""
    import time

    bundle, specs = engines
    params = SamplingParams(temperature=0.0, max_tokens=12)
    steps = RawEngine(bundle).generate(encode_prompt(bundle), params, _Cancel()) if engine == "raw" else \
        speculative_generate(bundle, specs, engine, encode_prompt(bundle), params, _Cancel(), None)
    seconds = []
    for i, step in enumerate(steps):
        if i:
            seconds.append(step.seconds)
        time.sleep(0.03)   # the consumer's work on this step
        if len(seconds) == 3:
            break
    assert min(seconds) >= 0.03


def test_a_window_is_projected_through_its_learned_persistence():
    """The rest of a request is the arm's mean plus the share of the window's dip that lasts: with
    the dip mostly transient, a bad window no longer hands a good engine's request to raw; with it
    lasting (or unlearned: 1.0), the same window does."""
    base = dict(window=4, margin=0.1, evidence_z=1.645, costs={"ddtree": 2.4}, step_sd={"ddtree": 1.0},
                targets=("raw",), expected={"ddtree": 2.5})
    transient, lasting = SwitchRule(**base, persistence={"ddtree": 0.2}), SwitchRule(**base, persistence={"ddtree": 0.95})
    unlearned = SwitchRule(**base)
    assert transient.projected("ddtree", 0.25) == pytest.approx(2.5 + 0.2 * (0.25 - 2.5))
    assert unlearned.projected("ddtree", 0.25) == 0.25 and transient.projected("raw", 0.0) == 0.0
    # a projection carries the window's noise scaled by its carry
    assert transient.threshold("ddtree", "raw") == pytest.approx(1.4 - 0.1 - 1.645 * 0.2 * 1.0 / 2)

    def hands_off(rule: SwitchRule) -> bool:
        watch = SwitchWatch(rule, "ddtree")
        for accepted in (0.0, 1.0, 0.0, 0.0):   # a bad window: 0.25 tokens per verify
            watch.record(accepted)
        return watch.choice(("raw",)) == "raw"

    assert not hands_off(transient)
    assert hands_off(lasting) and hands_off(unlearned)


def test_a_dip_counts_for_more_the_longer_it_lasts():
    """The share of a dip that lasts grows with the windows it has lasted, k·p / (k·p + 1 - p): one
    bad window is discounted (p), a collapse is soon taken nearly at face value; 1 stays 1."""
    base = dict(window=4, costs={"ddtree": 2.4}, step_sd={"ddtree": 1.0}, expected={"ddtree": 2.5})
    rule = SwitchRule(**base, persistence={"ddtree": 0.5})
    assert [rule.carry("ddtree", k) for k in (1, 2, 3, 9)] == pytest.approx([0.5, 2 / 3, 0.75, 0.9])
    assert rule.carry("ddtree", 0.5) == 0.5                        # never less than one window's share
    assert SwitchRule(**base).carry("ddtree", 5) == 1.0           # unlearned, face value: stays so
    assert SwitchRule(**base, persistence={"ddtree": 0.0}).carry("ddtree", 50) == 0.0
    assert rule.projected("ddtree", 0.5, 3) == pytest.approx(2.5 - 0.75 * 2.0)
    # k windows' mean is sqrt(k) times less noisy; it enters through the larger share
    noise = 1.645 * (0.75 * 1.0 / 3**0.5) / 4**0.5
    assert rule.threshold("ddtree", "raw", windows=3) == pytest.approx(1.4 - 0.1 - noise)


def _first_hand_off(rule: SwitchRule, accepted: list[float]) -> int | None:
    """The verify after which a DDTree request with `rule` hands off to raw, or None."""
    watch = SwitchWatch(rule, "ddtree")
    for i, value in enumerate(accepted):
        watch.record(value)
        if watch.choice(("raw",)) == "raw":
            return i
    return None


def test_one_bad_first_window_no_longer_hands_off_but_a_collapse_still_does():
    """Before the monitor has learned how long a dip lasts, the policy's prior share (0.5) stands in:
    a request whose first window dips and then recovers keeps its engine (face value handed it to
    raw after 8 verifies: the early greedy hand-offs that lost 9 % of an H200 run), while one whose
    acceptance collapses for good still goes to raw within a few windows, and alternating bad and
    good windows never add up to a lasting dip."""
    base = dict(window=8, margin=0.1, evidence_z=1.645, costs={"ddtree": 2.4}, step_sd={"ddtree": 1.2},
                targets=("raw",), expected={"ddtree": 2.5})
    prior, face_value = SwitchRule(**base, persistence={"ddtree": 0.5}), SwitchRule(**base)
    dip_then_recover = [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0] + [3.0, 2.0, 4.0, 2.0] * 8
    assert _first_hand_off(face_value, dip_then_recover) == 7
    assert _first_hand_off(prior, dip_then_recover) is None
    collapse = [2.0, 3.0, 2.0, 4.0] * 4 + [0.0] * 40
    at = _first_hand_off(prior, collapse)
    assert at is not None and 16 + 8 < at <= 16 + 4 * 8      # more than one window, at most four
    assert 16 < _first_hand_off(face_value, collapse) < 16 + 8   # face value: within the first window
    alternating = ([0.0] * 8 + [4.0] * 8) * 4
    assert _first_hand_off(prior, alternating) is None
