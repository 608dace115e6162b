"""Penalties, a JSON-schema constraint and log-probabilities under all three engines: the target's
distribution is processed identically at every verified position, so greedy mtp/ddtree output
equals raw token for token (float32), constrained output validates, and every engine reports the
same log-probabilities for the same tokens."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from contracts.engine import CancelToken
from contracts.sampling import SamplingParams
from gateway.http.request_spec import json_grammar

ENGINES = ("raw", "mtp", "ddtree")
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no", "maybe"]},
                                           "count": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["answer", "count"], "additionalProperties": False}


@pytest.fixture(scope="module")
def runtime(tiny_agree_target, tiny_agree_drafter):
    from engines.runtime import load_runtime

    return load_runtime(str(tiny_agree_target), draft_dir=str(tiny_agree_drafter))


def _generate(runtime, params: SamplingParams, engine: str, prompt: str = "the cat sat on the mat and the"):
    ids = runtime.encode_prompt(prompt)
    chunks = list(runtime.generate(ids, params, engine, CancelToken()))
    tokens = [t for c in chunks for t in c.token_ids]
    text = "".join(c.text for c in chunks)
    logprobs = [lp for c in chunks for lp in c.logprobs]
    steps = [c.step for c in chunks if c.step is not None]
    return tokens, text, logprobs, steps, chunks[-1].finish_reason


def _accepted(steps) -> int:
    return sum(sum(s.accepted_positions) for s in steps)


@pytest.mark.parametrize("penalties", [
    {"presence_penalty": 1.5},
    {"frequency_penalty": 0.8},
    {"repetition_penalty": 1.3},
    {"presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1},
], ids=["presence", "frequency", "repetition", "all"])
def test_greedy_speculation_equals_raw_under_penalties(runtime, penalties):
    params = SamplingParams(temperature=0.0, max_tokens=40, **penalties)
    raw, _, _, _, _ = _generate(runtime, params, "raw")
    plain, _, _, _, _ = _generate(runtime, SamplingParams(temperature=0.0, max_tokens=40), "raw")
    assert raw != plain, "the penalty must change the output, or this test proves nothing"
    for engine in ("mtp", "ddtree"):
        tokens, _, _, steps, _ = _generate(runtime, params, engine)
        assert tokens == raw, engine
        assert _accepted(steps) > 0, f"{engine} never accepted a draft: the rows were not verified"


def test_greedy_speculation_equals_raw_under_a_logit_bias(runtime):
    """OpenAI's logit_bias is part of the processed target distribution: a ban (-100) on tokens the plain
    output uses and a lift on another change raw's output, and mtp / ddtree still equal it."""
    plain, _, _, _, _ = _generate(runtime, SamplingParams(temperature=0.0, max_tokens=40), "raw")
    bias = ((plain[0], -100.0), (plain[5], -100.0), ((plain[0] + 7) % 50, 4.0))
    params = SamplingParams(temperature=0.0, max_tokens=40, logit_bias=bias)
    raw, _, _, _, _ = _generate(runtime, params, "raw")
    assert raw != plain and plain[0] not in raw and plain[5] not in raw
    for engine in ("mtp", "ddtree"):
        tokens, _, _, steps, _ = _generate(runtime, params, engine)
        assert tokens == raw, engine
        assert _accepted(steps) > 0, f"{engine} never accepted a draft: the rows were not verified"


def test_greedy_speculation_equals_raw_under_a_json_schema(runtime):
    grammar = json_grammar(SCHEMA)
    params = SamplingParams(temperature=0.0, max_tokens=60, grammar=grammar)
    outputs = {engine: _generate(runtime, params, engine) for engine in ENGINES}
    raw_tokens, raw_text, _, _, finish = outputs["raw"]
    assert finish == "stop", raw_text
    value = json.loads(raw_text)
    assert value["answer"] in ("yes", "no", "maybe") and isinstance(value["count"], int) and set(value) == set(SCHEMA["properties"])
    for engine in ("mtp", "ddtree"):
        assert outputs[engine][0] == raw_tokens, engine
    unconstrained = _generate(runtime, SamplingParams(temperature=0.0, max_tokens=60), "raw")[1]
    with pytest.raises(ValueError):
        json.loads(unconstrained)   # the negative control: without the grammar this model writes no JSON


def test_sampled_constrained_output_always_validates(runtime):
    grammar = json_grammar(SCHEMA)
    for engine in ENGINES:
        for seed in range(3):
            params = SamplingParams(temperature=1.0, seed=seed, max_tokens=60, grammar=grammar)
            _, text, _, _, finish = _generate(runtime, params, engine)
            assert finish == "stop", (engine, text)
            assert json.loads(text)["answer"] in ("yes", "no", "maybe")


def test_logprobs_are_the_targets_and_equal_across_engines(runtime):
    params = SamplingParams(temperature=0.0, max_tokens=24, logprobs=True, top_logprobs=3, presence_penalty=0.5)
    results = {engine: _generate(runtime, params, engine) for engine in ENGINES}
    tokens, _, logprobs, _, _ = results["raw"]
    assert [lp.token_id for lp in logprobs] == tokens
    for lp in logprobs:
        assert lp.logprob <= 0.0 and len(lp.top) == 3
        assert lp.top[0].token_id == lp.token_id          # greedy: the emitted token is the most likely
        assert lp.top[0].logprob == pytest.approx(lp.logprob, abs=1e-6)
        assert [a.logprob for a in lp.top] == sorted((a.logprob for a in lp.top), reverse=True)
    for engine in ("mtp", "ddtree"):
        other = results[engine][2]
        assert [lp.token_id for lp in other] == tokens
        np.testing.assert_allclose([lp.logprob for lp in other], [lp.logprob for lp in logprobs], atol=2e-4)
    unasked = _generate(runtime, replace(params, logprobs=False), "mtp")[2]
    assert unasked == []


def test_greedy_speculation_equals_raw_under_min_tokens(runtime):
    """min_tokens bans the ending tokens (EOS, stop_token_ids) at every position before it, in the target's
    logits: the plain output's tokens declared ends are kept out of its first min_tokens positions, and mtp /
    ddtree equal raw."""
    plain, _, _, _, _ = _generate(runtime, SamplingParams(temperature=0.0, max_tokens=40), "raw")
    ends = (plain[2], plain[6])
    params = SamplingParams(temperature=0.0, max_tokens=40, min_tokens=12, stop_token_ids=ends, ignore_eos=True)
    raw, _, _, _, _ = _generate(runtime, params, "raw")
    assert raw != plain and not set(raw[:12]) & set(ends)
    for engine in ("mtp", "ddtree"):
        tokens, _, _, steps, _ = _generate(runtime, params, engine)
        assert tokens == raw, engine
        assert _accepted(steps) > 0, f"{engine} never accepted a draft: the rows were not verified"


def test_min_tokens_bans_the_ends_only_before_it_and_then_leaves_the_fast_path_free(runtime):
    """Row r of a verify is the request's (emitted + len(path) + 1)-th token: the ends are -inf exactly where
    that is within min_tokens; once the request has emitted min_tokens, the processor is inactive (the engines
    go back to their unprocessed paths) and the logits pass through unchanged."""
    import mlx.core as mx

    from engines.processing import TargetProcessor

    bundle = runtime.bundle
    params = SamplingParams(temperature=0.0, min_tokens=3, stop_token_ids=(5,), ignore_eos=True)
    processor = TargetProcessor(params, [1, 2], bundle.tokenizer, bundle.vocab_size)
    logits = mx.zeros((3, bundle.vocab_size))
    processor.advance([7])
    rows = np.array(processor.apply(logits, [[], [8], [8, 9]]))
    assert np.isneginf(rows[:2, 5]).all() and rows[2, 5] == 0.0   # tokens 2 and 3 banned, the 4th free
    assert processor.active
    processor.advance([8, 9])
    assert not processor.active
    assert np.array_equal(np.array(processor.apply(logits[:1], [[]])), np.zeros((1, bundle.vocab_size)))
