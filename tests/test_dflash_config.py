"""DFlash drafter configs in both z-lab schemas (top-level rope_theta / June-2026 rope_parameters),
scaled RoPE (YaRN) computed as the published formulas say, and clear refusals of what we do not
understand."""

from __future__ import annotations

import json
import logging

import mlx.core as mx
import numpy as np
import pytest

from contracts.errors import ModelLoadError
from engines.dflash import load_drafter
from engines.dflash_config import DrafterConfig
from engines.runtime import load_runtime
from engines.testing import write_drafter_checkpoint
from engines.testing.measure import ReferenceDrafter

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32.0,
        "beta_slow": 1.0}


def _drafter(tmp_path, target, name, **kwargs):
    return write_drafter_checkpoint(tmp_path / name, target, seed=3, **kwargs)


@pytest.mark.parametrize("schema", ["flat", "nested"])
def test_both_schemas_give_the_written_settings(tmp_path, tiny_target, schema):
    directory = _drafter(tmp_path, tiny_target, schema, schema=schema, rope_theta=10_000_000.0, block_size=6)
    raw = json.loads((directory / "config.json").read_text())
    assert ("rope_parameters" in raw) == (schema == "nested") and ("block_size" in raw) == (schema == "flat")
    cfg = DrafterConfig.from_dict(raw)
    assert cfg.rope.theta == 10_000_000.0 and cfg.rope.kind == "default" and cfg.rope.scaling is None
    assert cfg.block_size == 6 and cfg.target_layer_ids == (0, 2)


@pytest.mark.parametrize("schema", ["flat", "nested"])
@pytest.mark.parametrize("theta,scaling", [(10_000_000.0, None), (50_000.0, YARN)])
def test_draft_logits_equal_a_reference_computation(tmp_path, tiny_target, tiny_bundle, schema, theta, scaling):
    """The engine's drafter (mlx-lm's RoPE modules) against the reference forward, whose RoPE is
    computed from the published default/YaRN formulas in numpy. Positions past the YaRN original
    context length (64) put the interpolated frequencies and the attention factor to work."""
    directory = _drafter(tmp_path, tiny_target, f"{schema}-{theta}", schema=schema, rope_theta=theta,
                         rope_scaling=scaling)
    drafter = load_drafter(directory, tiny_bundle)
    reference = ReferenceDrafter(directory, tiny_bundle.model)
    rng = np.random.default_rng(0)
    for length in (5, 90):
        outputs = [mx.array(rng.normal(size=(1, length, tiny_bundle.hidden_size)).astype(np.float32))
                   for _ in range(len(tiny_bundle.layers))]
        context = drafter.new_context()
        drafter.add_context([outputs[i][0] for i in drafter.cfg.target_layer_ids], context)
        bonus = 7
        block = mx.array([bonus] + [drafter.cfg.mask_token_id] * (drafter.cfg.block_size - 1), dtype=mx.uint32)
        got = tiny_bundle.lm_head(drafter(tiny_bundle.embed_tokens(block), context)[1:])
        want = reference.block_logits(reference.context(outputs), bonus)
        assert np.allclose(np.array(got), np.array(want), atol=2e-4), float(mx.abs(got - want).max())
    if scaling is not None:  # the scaled drafter really differs from a default one
        plain = load_drafter(_drafter(tmp_path, tiny_target, f"plain-{schema}", schema=schema, rope_theta=theta),
                             tiny_bundle)
        block = mx.array([7] + [drafter.cfg.mask_token_id] * (drafter.cfg.block_size - 1), dtype=mx.uint32)
        context_a, context_b = drafter.new_context(), plain.new_context()
        feats = [mx.array(rng.normal(size=(90, tiny_bundle.hidden_size)).astype(np.float32))
                 for _ in drafter.cfg.target_layer_ids]
        drafter.add_context(feats, context_a)
        plain.add_context(feats, context_b)
        a = drafter(tiny_bundle.embed_tokens(block), context_a)
        b = plain(tiny_bundle.embed_tokens(block), context_b)
        assert float(mx.abs(a - b).max()) > 1e-3


def _config(tiny_target, tmp_path, **changes):
    directory = _drafter(tmp_path, tiny_target, "base", schema="nested")
    raw = json.loads((directory / "config.json").read_text())
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            raw[outer][inner] = value
        else:
            raw[key] = value
    return raw


@pytest.mark.parametrize("changes,named", [
    ({"rope_parameters.rope_type": "longrope"}, "longrope"),
    ({"rope_parameters.truncate": False}, "rope_parameters.truncate"),
    ({"rope_parameters.rope_type": "yarn"}, "factor"),
    ({"rope_theta": 1234.0}, "conflicting RoPE bases"),
    ({"block_size": 99}, "block_size"),
    ({"attention_bias": True}, "attention_bias"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ({"dflash_config.noise_schedule": "cosine"}, "dflash_config.noise_schedule"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "disagree"),
])
def test_math_changing_fields_we_do_not_understand_are_refused(tiny_target, tmp_path, changes, named):
    with pytest.raises(ModelLoadError, match=named.replace(".", r"\.")):
        DrafterConfig.from_dict(_config(tiny_target, tmp_path, **changes))


def test_inert_multimodal_rope_keys_and_matching_duplicates_are_accepted(tiny_target, tmp_path):
    raw = _config(tiny_target, tmp_path, **{"rope_parameters.mrope_section": [11, 11, 10],
                                             "rope_parameters.mrope_interleaved": True})
    raw["rope_scaling"] = {"rope_type": "default", "mrope_section": [11, 11, 10]}
    raw["block_size"] = raw["dflash_config"]["block_size"]
    assert DrafterConfig.from_dict(raw).rope.kind == "default"


def test_the_serve_log_names_the_drafters_rope(tiny_target, tmp_path, caplog):
    directory = _drafter(tmp_path, tiny_target, "yarn", schema="nested", rope_theta=10_000_000.0, rope_scaling=YARN)
    with caplog.at_level(logging.INFO, logger="switchyard.runtime"):
        load_runtime(tiny_target, draft_dir=directory, mtp=False)
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("drafter "))
    assert "rope yarn theta=1e+07" in line and "factor=4.0" in line and "original_max_position_embeddings=64" in line
