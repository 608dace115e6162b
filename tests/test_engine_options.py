"""Engine options that follow the live policy, and the drafter's bounded context."""

from __future__ import annotations

import mlx.core as mx

from contracts.engine import CancelToken
from contracts.sampling import SamplingParams
from engines.ddtree import DDTreeEngine
from engines.dflash import load_drafter
from engines.raw import RawEngine
from engines.runtime import load_runtime
from gateway.cli.serve import bind_engine_options
from gateway.routing.policy_watch import PolicyStore
from tests.engine_helpers import PROMPTS, run_engine


def test_policy_budget_applies_and_follows_reloads(tiny_target, tiny_drafter, tmp_path):
    runtime = load_runtime(tiny_target, draft_dir=tiny_drafter, tree_budget=4)
    policy = tmp_path / "policy.yaml"
    policy.write_text("engines:\n  ddtree:\n    budget: 2\n")
    store = PolicyStore(policy)
    bind_engine_options(store, runtime)
    assert runtime.engines["ddtree"].budget == 2
    replacement = tmp_path / "policy.new"
    replacement.write_text("engines:\n  ddtree:\n    budget: 6\n")
    replacement.replace(policy)  # editors save by rename
    assert store.reload("test").ok
    assert runtime.engines["ddtree"].budget == 6
    policy.write_text("engines:\n  ddtree:\n    budget: 0\n")  # invalid: rejected, budget stays
    assert not store.reload("test").ok
    assert runtime.engines["ddtree"].budget == 6
    ids = runtime.encode_prompt(PROMPTS[0])
    chunks = list(runtime.generate(ids, SamplingParams(temperature=0.0, max_tokens=16), "ddtree", CancelToken()))
    assert all(c.step is None or c.step.drafted in (0, 6) for c in chunks)


def test_policy_caps_rows_per_batched_step_live_never_above_max_batch(tiny_target, tmp_path):
    runtime = load_runtime(tiny_target)
    runtime.set_batching(8)
    policy = tmp_path / "policy.yaml"
    policy.write_text("batching:\n  max_rows: 3\n")
    store = PolicyStore(policy)
    bind_engine_options(store, runtime)
    assert runtime.bundle.decode_batch.max_rows == 3
    policy.write_text("batching:\n  max_rows: 64\n")
    assert store.reload("test").ok
    assert runtime.bundle.decode_batch.max_rows == 8   # serve --max-batch bounds the policy
    runtime.set_batching(1)
    bind_engine_options(store, runtime)                # batching off: nothing to cap
    assert runtime.bundle.decode_batch is None


def test_sink_window_context_is_bounded_and_lossless(tiny_agree_bundle, tiny_agree_drafter):
    """A drafter context capped at sink + window rows keeps DDTree lossless (only acceptance can
    change) and never holds more rows than the cap, however long the prompt."""
    bundle = tiny_agree_bundle
    drafter = load_drafter(tiny_agree_drafter, bundle)
    engine = DDTreeEngine(bundle, drafter, budget=4, context_sink=4, context_window=16)
    raw = RawEngine(bundle)
    long_prompt = bundle.tokenizer.encode(" ".join(PROMPTS), add_special_tokens=False)
    assert len(long_prompt) > 40
    greedy = SamplingParams(temperature=0.0)
    assert run_engine(engine, long_prompt, 48, greedy)[0] == run_engine(raw, long_prompt, 48, greedy)[0]

    context = drafter.new_context(sink=4, window=16)
    rows = mx.zeros((len(long_prompt), bundle.hidden_size))
    drafter.add_context([rows] * len(drafter.cfg.target_layer_ids), context)
    assert context.positions.shape[0] == 20
    assert context.positions[:4].tolist() == [0, 1, 2, 3]
    assert context.positions[-1].item() == len(long_prompt) - 1   # absolute positions are kept
    assert context.length == len(long_prompt)
    assert all(k.shape[2] == 20 for k in context.keys)
