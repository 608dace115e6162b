"""MTP heads of MoE targets (qwen3_5_moe): HF expert layouts are stacked into mlx-lm's SwitchGLU,
and the engine stays lossless on a tiny MoE target."""

from __future__ import annotations

import json
import shutil

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from contracts.sampling import SamplingParams
from engines.bundle import load_bundle
from engines.mtp import MTPEngine
from engines.mtp_head import MTPHead, load_mtp_head, stack_experts
from engines.raw import RawEngine
from tests.engine_helpers import PROMPTS, run_engine

MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
       "shared_expert_intermediate_size": 32, "decoder_sparse_step": 1, "norm_topk_prob": True}


def _hf_head_tensors(head: MTPHead, fused: bool) -> dict[str, mx.array]:
    """The head as a Qwen3.5-MoE HF checkpoint stores it: `mtp.` names, zero-centred norms,
    experts fused (gate_up_proj / down_proj) or one tensor per expert."""
    out = {}
    for name, value in tree_flatten(head.parameters()):
        parts = name.split(".")
        if value.ndim == 1 and "norm" in parts[-2]:
            value = value - 1.0
        if ".switch_mlp." in name:
            prefix, _, rest = name.partition(".switch_mlp.")
            projection = rest.split(".")[0]
            if fused:
                if projection == "gate_proj":
                    up = dict(tree_flatten(head.parameters()))[f"{prefix}.switch_mlp.up_proj.weight"]
                    out[f"mtp.{prefix}.experts.gate_up_proj"] = mx.concatenate([value, up], axis=-2)
                elif projection == "down_proj":
                    out[f"mtp.{prefix}.experts.down_proj"] = value
            else:
                for e in range(value.shape[0]):
                    out[f"mtp.{prefix}.experts.{e}.{projection}.weight"] = value[e]
            continue
        out[f"mtp.{name}"] = value
    return out


@pytest.fixture(scope="module", params=["fused", "per_expert"])
def moe_target(request, tiny_target, tmp_path_factory):
    from mlx_lm.models import qwen3_5_moe

    directory = tmp_path_factory.mktemp(f"moe_{request.param}") / "target"
    directory.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(tiny_target / name, directory / name)
    config = json.loads((tiny_target / "config.json").read_text())
    config.update(MOE, model_type="qwen3_5_moe")
    (directory / "config.json").write_text(json.dumps(config))
    mx.random.seed(3)
    model = qwen3_5_moe.Model(qwen3_5_moe.ModelArgs.from_dict(config))
    head = MTPHead(model.language_model.args, 1)
    weights = dict(tree_flatten(model.parameters()))           # MLX layout: sanitize passes it through
    weights.update(_hf_head_tensors(head, fused=request.param == "fused"))
    mx.save_safetensors(str(directory / "model.safetensors"), weights)
    return directory, head


def test_stack_experts_layouts():
    gate, up, down = (mx.random.normal((3, 8, 5)) for _ in range(3))
    fused = stack_experts({"layers.0.mlp.experts.gate_up_proj": mx.concatenate([gate, up], axis=-2),
                           "layers.0.mlp.experts.down_proj": down, "norm.weight": mx.ones(5)})
    split = stack_experts({f"layers.0.mlp.experts.{e}.{p}.weight": w[e]
                           for e in range(3) for p, w in (("gate_proj", gate), ("up_proj", up), ("down_proj", down))})
    for stacked in (fused, split):
        assert mx.array_equal(stacked["layers.0.mlp.switch_mlp.gate_proj.weight"], gate)
        assert mx.array_equal(stacked["layers.0.mlp.switch_mlp.up_proj.weight"], up)
        assert mx.array_equal(stacked["layers.0.mlp.switch_mlp.down_proj.weight"], down)
    assert "norm.weight" in fused


def test_moe_head_loads_exactly_and_is_lossless(moe_target):
    directory, reference = moe_target
    bundle = load_bundle(directory)
    assert bundle.language_model.args.num_experts == 4
    head = load_mtp_head(bundle)
    ours, want = dict(tree_flatten(head.parameters())), dict(tree_flatten(reference.parameters()))
    assert ours.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(np.array(ours[name]), np.array(want[name]), atol=1e-6, err_msg=name)
    raw, mtp = RawEngine(bundle), MTPEngine(bundle, head)
    greedy = SamplingParams(temperature=0.0)
    for text in PROMPTS[:4]:
        ids = bundle.tokenizer.encode(text, add_special_tokens=False)
        assert run_engine(mtp, ids, 24, greedy)[0] == run_engine(raw, ids, 24, greedy)[0]
