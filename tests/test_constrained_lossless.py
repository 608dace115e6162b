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


def _contains(tokens: list[int], part: tuple[int, ...]) -> bool:
    return any(tuple(tokens[i:i + len(part)]) == part for i in range(len(tokens) - len(part) + 1))


def test_allowed_token_ids_and_bad_words_keep_speculation_lossless(runtime):
    """vLLM's allowed_token_ids (-inf outside them) and bad_words (a word's last token banned where its other
    tokens were just generated, per verified row with that row's path): greedy mtp / ddtree equal raw token for
    token, drafts are still accepted, and the output holds only allowed tokens / no bad word."""
    plain, _, _, _, _ = _generate(runtime, SamplingParams(temperature=0.0, max_tokens=40), "raw")
    allowed = tuple(dict.fromkeys(plain[:6]))
    tokenizer = runtime.bundle.tokenizer
    word = None
    for at in range(2, len(plain) - 1):   # a word of two tokens the plain reply writes, as vLLM tokenizes it
        text = tokenizer.decode(plain[at:at + 2])
        for candidate in (text.lstrip(), " " + text.lstrip()):
            if tuple(tokenizer.encode(candidate, add_special_tokens=False)) == tuple(plain[at:at + 2]):
                word = (text, tuple(plain[at:at + 2]))
                break
        if word:
            break
    assert word is not None, "no two-token word in the plain reply: this test proves nothing"
    for params, check in (
            (SamplingParams(temperature=0.0, max_tokens=40, allowed_token_ids=allowed),
             lambda tokens: set(tokens) <= set(allowed)),
            (SamplingParams(temperature=0.0, max_tokens=40, bad_words=(word[0],)),
             lambda tokens: not _contains(tokens, word[1]))):
        raw, _, _, _, _ = _generate(runtime, params, "raw")
        assert raw != plain and check(raw), "the field must change the output, or this test proves nothing"
        for engine in ("mtp", "ddtree"):
            tokens, _, _, steps, _ = _generate(runtime, params, engine)
            assert tokens == raw, engine
            assert _accepted(steps) > 0, f"{engine} never accepted a draft: the rows were not verified"


def test_bad_words_ban_per_row_on_the_rows_own_path(runtime):
    """A bad word of tokens (a, b, c): c is banned on exactly the rows whose generated tokens (the request's,
    then the row's path) end with a, b; the prompt does not count."""
    import mlx.core as mx

    from engines.processing import TargetProcessor

    class Words:   # a tokenizer whose words are their listed ids
        def encode(self, text, add_special_tokens=False):
            return {"bad": [11, 12, 13], " bad": [11, 12, 13]}.get(text, [])

    vocab = runtime.bundle.vocab_size
    processor = TargetProcessor(SamplingParams(temperature=0.0, bad_words=("bad",)), [11, 12], Words(), vocab)
    logits = mx.zeros((4, vocab))
    rows = np.array(processor.apply(logits, [[], [11], [11, 12], [12]]))
    # the prompt's 11, 12 are not generated tokens: only the row whose path writes them bans 13
    assert [bool(np.isneginf(r[13])) for r in rows] == [False, False, True, False] and np.isneginf(rows).sum() == 1
    processor.advance([11])
    rows = np.array(processor.apply(logits, [[], [12], [12, 11], [11, 12]]))
    assert [bool(np.isneginf(r[13])) for r in rows] == [False, True, False, True]
    assert np.isneginf(rows).sum() == 2


def test_repetition_window_reads_the_last_tokens_only(runtime):
    """llama.cpp's / Ollama's repeat_last_n: the repetition penalty covers the last n tokens of prompt + reply
    (per row with its path), not the whole context; speculation stays lossless under it."""
    import mlx.core as mx

    from engines.processing import TargetProcessor

    vocab = runtime.bundle.vocab_size
    processor = TargetProcessor(SamplingParams(temperature=0.0, repetition_penalty=2.0, repetition_window=3),
                                [5, 6, 7, 8], runtime.bundle.tokenizer, vocab)
    rows = np.array(processor.apply(mx.ones((2, vocab)), [[], [9]]))
    assert (rows[0, [6, 7, 8]] == 0.5).all() and rows[0, 5] == 1.0   # the window: 6, 7, 8
    assert (rows[1, [7, 8, 9]] == 0.5).all() and rows[1, 6] == 1.0   # the row's path moves it
    whole = SamplingParams(temperature=0.0, max_tokens=40, repetition_penalty=1.3)
    windowed = replace(whole, repetition_window=4)
    raw, _, _, _, _ = _generate(runtime, windowed, "raw")
    assert raw != _generate(runtime, whole, "raw")[0], "the window must change the output, or this proves nothing"
    for engine in ("mtp", "ddtree"):
        tokens, _, _, steps, _ = _generate(runtime, windowed, engine)
        assert tokens == raw, engine
        assert _accepted(steps) > 0, engine


def test_a_row_left_no_token_keeps_only_the_ending_tokens(runtime):
    """Where the request's bans leave a row nothing (allowed_token_ids outside a constraint's choices), the row's
    ending tokens get logit 0 and nothing else is finite; past a token the constraint rejects (that ending token,
    written on under ignore_eos), every row is such a row, the request's own and a draft path's alike."""
    import mlx.core as mx

    from engines.processing import TargetProcessor

    tokenizer = runtime.bundle.tokenizer
    vocab = runtime.bundle.vocab_size
    eos = sorted(int(t) for t in tokenizer.eos_token_ids)
    allowed = (int(tokenizer.encode("zzz", add_special_tokens=False)[0]),)
    params = SamplingParams(temperature=0.0, allowed_token_ids=allowed, ignore_eos=True,
                            grammar=json_grammar({"type": "boolean"}))
    processor = TargetProcessor(params, [1, 2], tokenizer, vocab)
    rows = np.array(processor.apply(mx.zeros((2, vocab)), [[], [eos[0]]]))
    for row in rows:
        assert sorted(np.flatnonzero(np.isfinite(row))) == eos and (row[eos] == 0).all()
    # a drafter's deeper rows are not ended: nothing there to draft
    assert np.isneginf(np.array(processor.apply(mx.zeros((1, vocab)), [[eos[0]]], dead_end=False))).all()
    processor.advance([eos[0]])
    assert processor.off_constraint
    plain = TargetProcessor(replace(params, allowed_token_ids=()), [1, 2], tokenizer, vocab)
    plain.advance([eos[0]])   # the constraint rejects it: nothing after it is the constraint's either
    assert sorted(np.flatnonzero(np.isfinite(np.array(plain.apply(mx.zeros((1, vocab)), [[]]))[0]))) == eos
