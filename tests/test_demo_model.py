"""The shipped demo family (models/switchyard-demo): formats, tokenizer agreement, and that the
trained MTP head and DFlash drafter actually predict the target under the documented semantics."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

FAMILY = Path(__file__).resolve().parent.parent / "models" / "switchyard-demo"
TARGET, DRAFTER = FAMILY / "target", FAMILY / "drafter"

CODE_CHAT = (
    "<|im_start|>user\nWrite a Python function `read_lines(path)` that returns the lines of a file.<|im_end|>\n"
    "<|im_start|>assistant\n```python\ndef read_lines(path):\n    \"\"\"Return the lines of a file.\"\"\"\n"
    "    with open(path) as f:\n        return [line.rstrip('\\n') for line in f]\n```<|im_end|>\n"
    "<|im_start|>user\nWrite a Python function `count_words(text)` that returns the number of words.<|im_end|>\n"
    "<|im_start|>assistant\n```python\ndef count_words(text):\n    \"\"\"Return the number of words in text.\"\"\"\n"
    "    return len(text.split())\n```<|im_end|>\n"
)


def safetensors_header(path: Path) -> dict[str, dict]:
    """Tensor name -> {dtype, shape} from the file header (no tensor data read)."""
    with path.open("rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
    header.pop("__metadata__", None)
    return header


@pytest.fixture(scope="module")
def config() -> dict:
    return json.loads((TARGET / "config.json").read_text())


@pytest.fixture(scope="module")
def target():
    from mlx_lm import load

    model, tokenizer = load(str(TARGET))
    model.set_dtype(mx.float32)
    return model, tokenizer


def test_family_fits_the_size_budget():
    total = sum(p.stat().st_size for p in FAMILY.rglob("*") if p.is_file())
    assert total <= 50 * 1024 * 1024, f"demo family is {total / 2**20:.1f} MiB"


def test_target_config_is_a_flat_qwen3_5_with_mtp(config):
    assert config["model_type"] == "qwen3_5"
    assert config["mtp_num_hidden_layers"] == 1
    assert config["eos_token_id"] == 8190
    assert config["layer_types"].count("full_attention") == config["num_hidden_layers"] // 4
    gen = json.loads((TARGET / "generation_config.json").read_text())
    assert config["eos_token_id"] in gen["eos_token_id"]


def test_target_weights_are_in_hf_layout_with_mtp_tensors(config):
    header = safetensors_header(TARGET / "model.safetensors")
    hidden, heads, kv, hd = (config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"],
                             config["head_dim"])
    inter = config["intermediate_size"]
    conv = header["model.layers.0.linear_attn.conv1d.weight"]["shape"]
    channels = 2 * config["linear_num_key_heads"] * config["linear_key_head_dim"] + \
        config["linear_num_value_heads"] * config["linear_value_head_dim"]
    assert conv == [channels, 1, config["linear_conv_kernel_dim"]]  # HF (C, 1, k), not MLX (C, k, 1)
    expected_mtp = {
        "mtp.fc.weight": [hidden, 2 * hidden],
        "mtp.pre_fc_norm_embedding.weight": [hidden],
        "mtp.pre_fc_norm_hidden.weight": [hidden],
        "mtp.norm.weight": [hidden],
        "mtp.layers.0.input_layernorm.weight": [hidden],
        "mtp.layers.0.post_attention_layernorm.weight": [hidden],
        "mtp.layers.0.self_attn.q_proj.weight": [2 * heads * hd, hidden],  # query + output gate
        "mtp.layers.0.self_attn.k_proj.weight": [kv * hd, hidden],
        "mtp.layers.0.self_attn.v_proj.weight": [kv * hd, hidden],
        "mtp.layers.0.self_attn.o_proj.weight": [hidden, heads * hd],
        "mtp.layers.0.self_attn.q_norm.weight": [hd],
        "mtp.layers.0.self_attn.k_norm.weight": [hd],
        "mtp.layers.0.mlp.gate_proj.weight": [inter, hidden],
        "mtp.layers.0.mlp.up_proj.weight": [inter, hidden],
        "mtp.layers.0.mlp.down_proj.weight": [hidden, inter],
    }
    assert {k: v["shape"] for k, v in header.items() if k.startswith("mtp.")} == expected_mtp
    weights = mx.load(str(TARGET / "model.safetensors"))
    zero_centred = [v.astype(mx.float32) for k, v in weights.items() if "norm" in k and "linear_attn" not in k]
    mean = float(mx.mean(mx.concatenate(zero_centred)).item())
    assert abs(mean) < 0.5, f"HF stores RMSNorm weights zero-centred (x * (1 + w)); mean is {mean:.2f}"
    gated = mx.concatenate([v.astype(mx.float32) for k, v in weights.items() if k.endswith("linear_attn.norm.weight")])
    assert float(mx.mean(gated).item()) > 0.5, "the GatedDeltaNet output norm is plain x * w in HF too"


def test_drafter_has_the_zlab_layout(config):
    cfg = json.loads((DRAFTER / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"]
    dflash = cfg["dflash_config"]
    assert dflash["mask_token_id"] == 8191 and dflash["block_size"] >= 2
    assert max(dflash["target_layer_ids"]) < config["num_hidden_layers"]
    hidden, heads, kv, hd, inter = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                                    cfg["head_dim"], cfg["intermediate_size"])
    expected = {"fc.weight": [hidden, len(dflash["target_layer_ids"]) * hidden], "hidden_norm.weight": [hidden],
                "norm.weight": [hidden]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        expected.update({
            p + "input_layernorm.weight": [hidden], p + "post_attention_layernorm.weight": [hidden],
            p + "self_attn.q_proj.weight": [heads * hd, hidden], p + "self_attn.k_proj.weight": [kv * hd, hidden],
            p + "self_attn.v_proj.weight": [kv * hd, hidden], p + "self_attn.o_proj.weight": [hidden, heads * hd],
            p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd],
            p + "mlp.gate_proj.weight": [inter, hidden], p + "mlp.up_proj.weight": [inter, hidden],
            p + "mlp.down_proj.weight": [hidden, inter],
        })
    header = safetensors_header(DRAFTER / "model.safetensors")
    assert {k: v["shape"] for k, v in header.items()} == expected
    weights = mx.load(str(DRAFTER / "model.safetensors"))
    assert float(mx.mean(weights["norm.weight"].astype(mx.float32)).item()) > 0.5, "Qwen3 norms are x * w"


TEXTS = [
    "def foo(x):\n    return x**2  # square\n\n\n",
    "Héllo wörld! It's  café\u0301 — naïve 123456 façade",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    '{"a": [1, 2.5e-3, null], "b": {"c": "d"}}\n\t  ',
    "日本語のテキスト and ÅΩ≈ç√∫ emoji 🙂 I'll we've THEY'RE",
    "SELECT * FROM t WHERE x='y';\r\n   leading\n\n\nCRLF\r\n\r\n",
]


def test_tokenizers_transformers_and_mlx_lm_agree(target):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    raw = Tokenizer.from_file(str(TARGET / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(str(TARGET))
    _, mlx_tok = target
    for text in TEXTS:
        ids = raw.encode(text).ids
        assert hf.encode(text, add_special_tokens=False) == ids, text
        assert mlx_tok.encode(text, add_special_tokens=False) == ids, text
    assert hf.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]) == \
        [8188, 8189, 8190, 8191]
    assert mlx_tok.eos_token_id == 8190
    chat = hf.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_greedy_generation_is_finite_and_not_degenerate(target):
    from mlx_lm import generate

    model, tokenizer = target
    prompt = "<|im_start|>user\nWrite a Python function `add(a, b)` that returns a + b.<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    logits = model(mx.array([ids]))
    assert bool(mx.all(mx.isfinite(logits)).item())
    text = generate(model, tokenizer, prompt, max_tokens=24)
    assert "def add" in text  # the trained model answers on topic
    out_ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(set(out_ids)) >= 6


def target_pass(model, ids: list[int]) -> tuple[mx.array, dict[int, mx.array]]:
    """Final-norm hidden states and every decoder layer's output (residual stream), one causal pass."""
    from mlx_lm.models.base import create_attention_mask

    inner = model.language_model.model
    h = inner.embed_tokens(mx.array([ids]))
    mask = create_attention_mask(h, None)
    outputs = {}
    for i, layer in enumerate(inner.layers):
        h = layer(h, mask=None if layer.is_linear else mask, cache=None)
        outputs[i] = h
    return inner.norm(h), outputs


def test_mtp_head_predicts_the_target_two_ahead(target, config):
    """Independent MLX rendering of the documented head: row t = fc([norm_e(embed(x[t+1])), norm_h(H[t])]),
    causal layer over head rows, target lm_head(norm(.)) must match the target's argmax at row t+1."""
    from mlx_lm.models import qwen3_5
    from mlx_lm.models.base import create_attention_mask

    model, tokenizer = target
    ids = tokenizer.encode(CODE_CHAT, add_special_tokens=False)
    hidden, _ = target_pass(model, ids)
    lm_head = model.language_model.model.embed_tokens.as_linear
    target_next = mx.argmax(lm_head(hidden[0]), axis=-1)

    args = model.language_model.args
    weights = {k[len("mtp."):]: v.astype(mx.float32) for k, v in mx.load(str(TARGET / "model.safetensors")).items()
               if k.startswith("mtp.")}
    weights = {k: (v + 1.0 if "norm" in k.split(".")[-2] else v) for k, v in weights.items()}  # zero-centred
    eps = args.rms_norm_eps
    layer = qwen3_5.DecoderLayer(args, args.full_attention_interval - 1)
    layer.load_weights([(k[len("layers.0."):], v) for k, v in weights.items() if k.startswith("layers.0.")])
    embeds = model.language_model.model.embed_tokens(mx.array(ids[1:]))[None]
    u = mx.concatenate([mx.fast.rms_norm(embeds, weights["pre_fc_norm_embedding.weight"], eps),
                        mx.fast.rms_norm(hidden[:, :-1], weights["pre_fc_norm_hidden.weight"], eps)], axis=-1)
    u = u @ weights["fc.weight"].T
    u = layer(u, mask=create_attention_mask(u, None), cache=None)
    head_pred = mx.argmax(lm_head(mx.fast.rms_norm(u, weights["norm.weight"], eps))[0], axis=-1)
    agreement = float(mx.mean(head_pred == target_next[1:]).item())  # head row t vs target row t+1
    assert agreement >= 0.5, f"MTP head agrees with the target on {agreement:.2f} of rows"


def test_dflash_drafter_predicts_the_target_block(target):
    """The drafter through the engine's loader, fed target layer outputs for rows < P and the
    block [x[P], MASK...]: its first drafted position must often match the target's argmax."""
    from engines.bundle import ModelBundle
    from engines.dflash import load_drafter

    model, tokenizer = target
    bundle = ModelBundle(TARGET, model, tokenizer, json.loads((TARGET / "config.json").read_text()))
    drafter = load_drafter(DRAFTER, bundle)
    cfg = drafter.cfg
    ids = tokenizer.encode(CODE_CHAT, add_special_tokens=False)
    hidden, layer_out = target_pass(bundle.model, ids)
    target_next = np.array(mx.argmax(bundle.lm_head(hidden[0]), axis=-1))
    hits, anchors = [], range(24, len(ids) - cfg.block_size, 4)
    for anchor in anchors:
        context = drafter.new_context()
        drafter.add_context([layer_out[i][0, :anchor] for i in cfg.target_layer_ids], context)
        block = mx.array([ids[anchor]] + [cfg.mask_token_id] * (cfg.block_size - 1))
        states = drafter(bundle.embed_tokens(block), context)
        draft = np.array(mx.argmax(bundle.lm_head(states[1:]), axis=-1))
        hits.append(draft[0] == target_next[anchor])
    assert np.mean(hits) >= 0.4, f"first drafted token matched the target on {np.mean(hits):.2f} of blocks"


def test_a_prompt_inside_the_model_window_draws_no_tokenizer_warning(capfd):
    """The demo's tokenizer_config says model_max_length 4096 while its positions reach 8192: the bundle
    gives the tokenizer the model's window, so a 5,000-token prompt the runtime serves logs nothing
    about "indexing errors" (transformers said so, on stderr, at the first such prompt)."""
    from engines.bundle import load_bundle

    bundle = load_bundle(TARGET)
    assert bundle.context_length == 8192
    capfd.readouterr()
    ids = bundle.tokenizer.encode("lorem ipsum dolor sit amet " * 500)
    assert 4096 < len(ids) < 8192
    assert "sequence length" not in capfd.readouterr().err
