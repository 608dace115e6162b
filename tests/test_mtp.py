"""MTP-K1 engine: loader, losslessness (greedy and sampled), caches, memory, quantized targets."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import KVCache

from contracts.errors import ModelLoadError
from contracts.sampling import SamplingParams
from engines.bundle import load_bundle
from engines.mtp import MTPEngine
from engines.mtp_head import _zero_centred, load_mtp_head, read_mtp_tensors
from engines.prefill import prefill
from engines.raw import RawEngine
from engines.sampling import Candidates, Rng, SamplerConfig, candidates, log_probs
from engines.speculative import verify_one
from engines.target import commit, forward_causal, forward_tree
from engines.tree import TreeLayout
from tests.engine_helpers import PROMPTS, encode, run_engine, tv_bound, tv_distance

GREEDY = SamplingParams(temperature=0.0)


@pytest.mark.parametrize("which", ["agree", "random"])
def test_greedy_equals_raw(which, tiny_agree_bundle, tiny_bundle):
    bundle = tiny_agree_bundle if which == "agree" else tiny_bundle
    raw, mtp = RawEngine(bundle), MTPEngine(bundle, load_mtp_head(bundle))
    accepted = rejected = 0
    for text in PROMPTS[:20]:
        ids = encode(bundle, text)
        want, _ = run_engine(raw, ids, 64, GREEDY)
        got, steps = run_engine(mtp, ids, 64, GREEDY)
        assert got == want, text
        accepted += sum(s.accepted for s in steps if s.drafted)
        rejected += sum(s.drafted - s.accepted for s in steps if s.drafted)
    assert rejected > 0
    if which == "agree":  # the constructed head agrees often: both paths must be exercised
        assert accepted > 0.2 * (accepted + rejected), (accepted, rejected)


def test_caches_match_sequential_decode(tiny_bundle):
    """Any accept/reject sequence of 2-token verifies leaves the target caches exactly as a plain
    sequential forward of the committed tokens would (GDN conv + recurrent state, KV rows)."""
    bundle = tiny_bundle
    rs = np.random.RandomState(0)
    prompt = encode(bundle, PROMPTS[0])
    cache = bundle.make_cache()
    prefill(bundle, cache, prompt, last_alone=True)
    committed = list(prompt)
    pending = int(rs.randint(bundle.embed_tokens.weight.shape[0]))
    for step in range(12):
        draft = int(rs.randint(bundle.embed_tokens.weight.shape[0]))
        out = forward_tree(bundle, mx.array([pending, draft], dtype=mx.uint32), TreeLayout.chain(2), cache)
        accept = bool(step % 3)
        commit(bundle, cache, out, [0, 1] if accept else [0])
        committed += [pending, draft] if accept else [pending]
        pending = int(rs.randint(bundle.embed_tokens.weight.shape[0]))
    reference = bundle.make_cache()
    forward_causal(bundle, mx.array(committed, dtype=mx.uint32), reference)
    for ours, ref in zip(cache, reference):
        if isinstance(ours, KVCache):
            assert ours.offset == ref.offset == len(committed)
            np.testing.assert_allclose(np.array(ours.keys[..., : ours.offset, :]), np.array(ref.keys[..., : ref.offset, :]), atol=1e-5)
            np.testing.assert_allclose(np.array(ours.values[..., : ours.offset, :]), np.array(ref.values[..., : ref.offset, :]), atol=1e-5)
        else:
            np.testing.assert_allclose(np.array(ours[0]), np.array(ref[0]), atol=1e-5)
            np.testing.assert_allclose(np.array(ours[1]), np.array(ref[1]), atol=1e-5)


def _first_two_exact(bundle, prompt, cfg):
    """Exact joint distribution of the first two raw-sampled tokens."""
    cache = bundle.make_cache()
    first = prefill(bundle, cache, prompt, last_alone=True)
    p1 = np.array(mx.exp(log_probs(bundle.lm_head(first.hidden[-1]), cfg)))
    joint = {}
    for x1 in np.nonzero(p1)[0]:
        after = prefill(bundle, bundle.make_cache(), prompt + [int(x1)], last_alone=True)
        p2 = np.array(mx.exp(log_probs(bundle.lm_head(after.hidden[-1]), cfg)))
        for x2 in np.nonzero(p2)[0]:
            joint[(int(x1), int(x2))] = float(p1[x1] * p2[x2])
    return p1, joint


def _mtp_first_two_draws(bundle, head, prompt, cfg, n, *, biased=False):
    """Draw (x1, x2) n times through the MTP engine's own pieces: for each x1 the head's draft
    distribution q and the 2-token target verify of every draftable d, then the batched verify
    rule `verify_one` with fresh randomness per draw."""
    cache = bundle.make_cache()
    first = prefill(bundle, cache, prompt, last_alone=True)
    p1 = np.array(mx.exp(log_probs(bundle.lm_head(first.hidden[-1]), cfg)))
    engine = MTPEngine(bundle, head)
    rng = Rng(1234)
    x1s = np.random.RandomState(7).choice(len(p1), size=n, p=p1 / p1.sum())
    counts: Counter = Counter()
    for x1 in np.unique(x1s):
        rows = int((x1s == x1).sum())
        c = bundle.make_cache()
        pre = prefill(bundle, c, prompt, last_alone=True)
        draft_logits = engine.bundle.lm_head(engine.head_rows(mx.array(prompt[1:] + [int(x1)], dtype=mx.uint32), pre.hidden, KVCache())[-1])
        q = candidates(draft_logits, cfg)
        q_lp = q.dense(bundle.vocab_size)
        verify_logits = {}
        for d in np.nonzero(np.array(mx.exp(q_lp)))[0]:
            out = forward_tree(bundle, mx.array([int(x1), int(d)], dtype=mx.uint32), TreeLayout.chain(2), c)
            verify_logits[int(d)] = bundle.lm_head(out.hidden)
            for layer_cache in c:  # drop the verify's KV rows: every d sees the same context
                if isinstance(layer_cache, KVCache):
                    layer_cache.offset -= 2
        q_rows = Candidates(None if q.tokens is None else mx.broadcast_to(q.tokens, (rows, q.tokens.shape[-1])),
                            mx.broadcast_to(q.logprobs, (rows, q.logprobs.shape[-1])))
        drafts = rng.sample(q_rows)
        if biased:  # negative control: always accept the draft (what a broken verify does)
            x2s = drafts
        else:
            logits = mx.stack([verify_logits[int(d)] for d in drafts.tolist()])
            verdict = verify_one(drafts, q_rows, logits, cfg, rng)
            x2s = mx.where(verdict.accepted, drafts, verdict.bonus)
        counts.update((int(x1), int(x2)) for x2 in x2s.tolist())
    return counts


@pytest.mark.parametrize("which,biased", [("agree", False), ("random", False), ("random", True)])
def test_sampling_lossless_first_two_tokens(which, biased, tiny_agree_bundle, tiny_bundle):
    """agree: mostly the accept path; random: mostly the residual path; the negative control (a
    verify that always accepts) uses the random head, whose q is far from p, so it must fail."""
    bundle = tiny_agree_bundle if which == "agree" else tiny_bundle
    head = load_mtp_head(bundle)
    cfg = SamplerConfig(temperature=1.0, top_p=0.9, top_k=6, min_p=0.0)
    prompt = encode(bundle, PROMPTS[2])
    _, exact = _first_two_exact(bundle, prompt, cfg)
    n = 20000
    counts = _mtp_first_two_draws(bundle, head, prompt, cfg, n, biased=biased)
    tv = tv_distance(counts, exact, n)
    bound = tv_bound(len(exact), n)
    if biased:
        assert tv > 2 * bound, (tv, bound)   # the test can fail, by a wide margin
    else:
        assert tv < bound, (tv, bound)


def test_sampled_engine_runs_and_is_seeded(tiny_agree_bundle):
    mtp = MTPEngine(tiny_agree_bundle, load_mtp_head(tiny_agree_bundle))
    params = SamplingParams(temperature=1.0, top_p=0.95, top_k=20, seed=5)
    ids = encode(tiny_agree_bundle, PROMPTS[0])
    a, steps = run_engine(mtp, ids, 32, params)
    b, _ = run_engine(mtp, ids, 32, params)
    assert a == b and len(a) == 32
    assert any(s.drafted for s in steps)


def test_memory_grows_by_head_only(tiny_bundle):
    mx.clear_cache()
    before = mx.get_active_memory()
    head = load_mtp_head(tiny_bundle)
    mx.clear_cache()
    grown = mx.get_active_memory() - before
    assert grown <= head.nbytes() * 1.05 + 65536, (grown, head.nbytes())


def test_norm_shift_applied_once(tiny_target, tmp_path):
    tensors = read_mtp_tensors(tiny_target)
    assert _zero_centred(tensors)
    bundle = load_bundle(tiny_target)
    head = load_mtp_head(bundle)
    shifted_dir = tmp_path / "shifted"
    shutil.copytree(tiny_target, shifted_dir)
    # rewrite the mtp norms already shifted (+1), as some converters do
    all_tensors = mx.load(str(shifted_dir / "model.safetensors"))
    for k in list(all_tensors):
        if k.startswith("mtp.") and "norm" in k.split(".")[-2]:
            all_tensors[k] = all_tensors[k] + 1.0
    mx.save_safetensors(str(shifted_dir / "model.safetensors"), all_tensors)
    head2 = load_mtp_head(load_bundle(shifted_dir))
    np.testing.assert_allclose(np.array(head.norm.weight), np.array(head2.norm.weight), atol=1e-6)
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden"):
        np.testing.assert_allclose(np.array(getattr(head, name).weight), np.array(getattr(head2, name).weight), atol=1e-6)
    np.testing.assert_allclose(np.array(head.layers[0].input_layernorm.weight), np.array(head2.layers[0].input_layernorm.weight), atol=1e-6)
    np.testing.assert_allclose(np.array(head.layers[0].self_attn.q_norm.weight), np.array(head2.layers[0].self_attn.q_norm.weight), atol=1e-6)
    # shifted once: the loaded weights sit around 1, as MLX's RMSNorm expects
    assert abs(float(head.pre_fc_norm_embedding.weight.mean().item()) - 1.0) < 0.2


def test_sharded_checkpoint_reads_only_mtp_shard(tiny_sharded_target):
    index = json.loads((tiny_sharded_target / "model.safetensors.index.json").read_text())
    shards = {v for k, v in index["weight_map"].items() if k.startswith("mtp.")}
    assert len(shards) == 1
    bundle = load_bundle(tiny_sharded_target)
    head = load_mtp_head(bundle)
    ids = encode(bundle, PROMPTS[3])
    want, _ = run_engine(RawEngine(bundle), ids, 24, GREEDY)
    got, _ = run_engine(MTPEngine(bundle, head), ids, 24, GREEDY)
    assert got == want


def test_missing_mtp_tensors_has_clear_error(tiny_target, tmp_path):
    stripped = tmp_path / "stripped"
    shutil.copytree(tiny_target, stripped)
    tensors = {k: v for k, v in mx.load(str(stripped / "model.safetensors")).items() if not k.startswith("mtp.")}
    mx.save_safetensors(str(stripped / "model.safetensors"), tensors)
    bundle = load_bundle(stripped)
    with pytest.raises(ModelLoadError, match="--mtp-weights"):
        load_mtp_head(bundle)
    head = load_mtp_head(bundle, tiny_target)  # the sidecar path: the original checkpoint
    assert head.nbytes() > 0


def test_quantized_target_with_mtp_weights(tiny_agree_target, tmp_path):
    from mlx_lm import convert

    quantized = tmp_path / "q4"
    convert(str(tiny_agree_target), mlx_path=str(quantized), quantize=True, q_bits=4, q_group_size=32)
    bundle = load_bundle(quantized)
    assert not read_mtp_tensors(quantized)  # the conversion stripped the head, as mlx-community's do
    head = load_mtp_head(bundle, tiny_agree_target)
    assert hasattr(head.layers[0].self_attn.q_proj, "scales")       # quantized like the host
    assert not hasattr(head.fc, "scales")                           # fc stays full precision
    raw, mtp = RawEngine(bundle), MTPEngine(bundle, head)
    accepted = 0
    for text in PROMPTS[:6]:
        ids = encode(bundle, text)
        want, _ = run_engine(raw, ids, 32, GREEDY)
        got, steps = run_engine(mtp, ids, 32, GREEDY)
        assert got == want
        accepted += sum(s.accepted for s in steps)
    assert accepted > 0
