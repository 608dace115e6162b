"""The generated test checkpoints are in the real on-disk formats and load through the real loaders."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file

from engines.testing import MASK, build_tokenizer, write_drafter_checkpoint, write_target_checkpoint
from engines.testing.measure import read_tensors
from engines.testing.spec import TargetSpec

SPEC = TargetSpec()

TEXTS = [
    "Hello, world! It's a test: don't panic.",
    "def f(x):\n\treturn x ** 2  # square\n\n\n    if   x:  pass",
    "   leading and trailing spaces   ",
    "Numbers 1234567 3.14159 -42 1e-9 0x1F",
    '{"key": [1, 2, 3], "nested": {"a": null, "b": true}}',
    "name: demo\nitems:\n  - one\n  - two\r\n",
    "SELECT * FROM t WHERE id IN (1,2,3) ORDER BY name;",
    "中文文本测试，你好世界。日本語のテキスト。한국어",
    "café naïve e\u0301 (combining) Ångström Straße Ελληνικά русский",
    "emoji 😀👍🏽 and symbols ✓ → ★ € £ ¥",
    "tabs\t\tand\nnewlines\n\n\nand    runs of      spaces",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
]


def _load(path: Path):
    import mlx_lm

    return mlx_lm.load(str(path))


# --- tokenizer ---------------------------------------------------------------------------------


def test_tokenizer_agrees_across_tokenizers_transformers_and_mlx_lm(tiny_target):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    raw = Tokenizer.from_file(str(tiny_target / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(str(tiny_target))
    _, wrapped = _load(tiny_target)
    assert type(hf).__name__.startswith("Qwen")  # transformers rebuilt its own Qwen tokenizer
    for text in TEXTS:
        ids = raw.encode(text).ids
        assert hf.encode(text, add_special_tokens=False) == ids, text
        assert wrapped.encode(text, add_special_tokens=False) == ids, text
        assert raw.decode(ids, skip_special_tokens=False) == hf.decode(ids) == wrapped.decode(ids)
    # The NFC normaliser: a decomposed "é" encodes like the composed one.
    assert raw.encode("e\u0301").ids == raw.encode("\u00e9").ids


_ALPHABET = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    " \t\n\r  .,;:!?'\"()[]{}<>=+-*/\\_#@$%^&|~`"
    "éèêëàâäôöûüçñÅßΩπ" "\u0301\u0308"  # precomposed letters and combining marks (NFC)
    "中文测试你好世界日本語한국어" "😀👍🏽✓→★€£¥"
)


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=_ALPHABET, max_size=60))
def test_tokenizer_agreement_on_generated_text(text, tiny_tokenizers):
    raw, hf = tiny_tokenizers
    ids = raw.encode(text).ids
    assert hf.encode(text, add_special_tokens=False) == ids
    assert hf.decode(ids) == raw.decode(ids, skip_special_tokens=False)


@pytest.fixture(scope="module")
def tiny_tokenizers(tiny_target):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    return Tokenizer.from_file(str(tiny_target / "tokenizer.json")), AutoTokenizer.from_pretrained(str(tiny_target))


def test_tokenizer_has_specials_and_size():
    tokenizer = build_tokenizer()
    assert tokenizer.get_vocab_size() == SPEC.vocab_size
    for token in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", MASK):
        token_id = tokenizer.token_to_id(token)
        assert token_id is not None and tokenizer.encode(token).ids == [token_id]


def test_chat_template_renders_through_mlx_lm(tiny_target):
    _, tokenizer = _load(tiny_target)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                    "<|im_start|>assistant\n")
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    assert tokenizer.decode(ids) == text
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end in tokenizer.eos_token_ids
    config = json.loads((tiny_target / "generation_config.json").read_text())
    assert im_end in config["eos_token_id"] and {"temperature", "top_p", "top_k"} <= config.keys()


# --- target ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["random", "agree", "sharded", "nested", "bfloat16"])
def test_mlx_lm_loads_target_with_finite_logits(kind, tiny_target, tiny_agree_target, tiny_sharded_target, tmp_path):
    path = {"random": tiny_target, "agree": tiny_agree_target, "sharded": tiny_sharded_target}.get(kind)
    if kind == "nested":
        path = write_target_checkpoint(tmp_path / "nested", nested=True)
    if kind == "bfloat16":
        path = write_target_checkpoint(tmp_path / "bf16", dtype="bfloat16")
    model, tokenizer = _load(path)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "Write a haiku."}], add_generation_prompt=True)
    logits = model(mx.array([ids]))
    assert logits.shape == (1, len(ids), SPEC.vocab_size)
    assert bool(mx.all(mx.isfinite(logits)))
    layers = model.language_model.model.layers
    assert [layer.is_linear for layer in layers] == [True, True, True, False]  # mixed GDN + attention


def test_random_target_is_peaked(tiny_target):
    model, tokenizer = _load(tiny_target)
    ids = tokenizer.encode("The river ran quietly past the old mill, where the daughter sat reading.")
    probs = mx.softmax(model(mx.array([ids]))[0].astype(mx.float32), axis=-1)
    top = np.array(mx.max(probs, axis=-1))
    assert np.median(top) > 0.2, "near-uniform logits make greedy and sampling tests weak"


def test_config_sets_every_size_field(tiny_target):
    config = json.loads((tiny_target / "config.json").read_text())
    from mlx_lm.models.qwen3_5 import TextModelArgs

    for field in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                  "head_dim", "vocab_size", "linear_num_value_heads", "linear_num_key_heads", "linear_key_head_dim",
                  "linear_value_head_dim", "linear_conv_kernel_dim", "full_attention_interval", "eos_token_id",
                  "max_position_embeddings"):
        assert field in config, field
    assert config["model_type"] == "qwen3_5" and config["mtp_num_hidden_layers"] == 1
    assert config["tie_word_embeddings"] is False
    assert config["rope_parameters"]["partial_rotary_factor"] == 0.25
    assert TextModelArgs.from_dict(config).hidden_size == SPEC.hidden_size


def test_sanitize_converts_hf_layout(tiny_target):
    """HF layout in (conv1d (C,1,k), zero-centred norms), MLX layout out: mlx-lm's sanitize ran."""
    stored = read_tensors(tiny_target)
    model, _ = _load(tiny_target)
    text = model.language_model
    conv_key = "model.layers.0.linear_attn.conv1d.weight"
    assert stored[conv_key].shape == (SPEC.conv_dim, 1, SPEC.linear_conv_kernel_dim)
    loaded_conv = text.model.layers[0].linear_attn.conv1d.weight
    assert loaded_conv.shape == (SPEC.conv_dim, SPEC.linear_conv_kernel_dim, 1)
    np.testing.assert_array_equal(np.array(loaded_conv)[:, :, 0], stored[conv_key][:, 0, :])

    layer3 = text.model.layers[3]
    shifted = {
        "model.norm.weight": text.model.norm.weight,
        "model.layers.0.input_layernorm.weight": text.model.layers[0].input_layernorm.weight,
        "model.layers.3.post_attention_layernorm.weight": layer3.post_attention_layernorm.weight,
        "model.layers.3.self_attn.q_norm.weight": layer3.self_attn.q_norm.weight,
        "model.layers.3.self_attn.k_norm.weight": layer3.self_attn.k_norm.weight,
    }
    for key, loaded in shifted.items():
        assert abs(float(stored[key].mean())) < 0.2, f"{key} must be stored zero-centred"
        np.testing.assert_allclose(np.array(loaded), stored[key] + 1.0, rtol=0, atol=1e-6, err_msg=key)
    # The GatedDeltaNet gated norm is NOT zero-centred in HF and is loaded unchanged.
    gated_key = "model.layers.0.linear_attn.norm.weight"
    assert abs(float(stored[gated_key].mean()) - 1.0) < 0.2
    np.testing.assert_array_equal(np.array(text.model.layers[0].linear_attn.norm.weight), stored[gated_key])


def test_mtp_tensors_in_hf_naming(tiny_target):
    stored = read_tensors(tiny_target)
    h, hd, inter = SPEC.hidden_size, SPEC.head_dim, SPEC.intermediate_size
    nh, nkv = SPEC.num_attention_heads, SPEC.num_key_value_heads
    expected = {
        "mtp.fc.weight": (h, 2 * h),
        "mtp.pre_fc_norm_embedding.weight": (h,),
        "mtp.pre_fc_norm_hidden.weight": (h,),
        "mtp.norm.weight": (h,),
        "mtp.layers.0.input_layernorm.weight": (h,),
        "mtp.layers.0.post_attention_layernorm.weight": (h,),
        "mtp.layers.0.self_attn.q_proj.weight": (2 * nh * hd, h),
        "mtp.layers.0.self_attn.k_proj.weight": (nkv * hd, h),
        "mtp.layers.0.self_attn.v_proj.weight": (nkv * hd, h),
        "mtp.layers.0.self_attn.o_proj.weight": (h, nh * hd),
        "mtp.layers.0.self_attn.q_norm.weight": (hd,),
        "mtp.layers.0.self_attn.k_norm.weight": (hd,),
        "mtp.layers.0.mlp.gate_proj.weight": (inter, h),
        "mtp.layers.0.mlp.up_proj.weight": (inter, h),
        "mtp.layers.0.mlp.down_proj.weight": (h, inter),
    }
    assert {k: v.shape for k, v in stored.items() if k.startswith("mtp.")} == expected
    # Same names and shapes as a target attention layer (the head's layer is one).
    for name, shape in expected.items():
        if name.startswith("mtp.layers.0."):
            assert stored["model.layers.3." + name[len("mtp.layers.0."):]].shape == shape
    for norm in ("mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.layers.0.input_layernorm.weight"):
        assert abs(float(stored[norm].mean())) < 0.2, "HF stores the head's norms zero-centred"


def test_shifted_norms_variant_stores_mtp_norms_plus_one(tiny_target, tmp_path):
    shifted = read_tensors(write_target_checkpoint(tmp_path / "shifted", norms="shifted"))
    hf = read_tensors(tiny_target)
    for name in hf:
        if name.startswith("mtp.") and "norm" in name:  # every head norm, layer norms included
            np.testing.assert_allclose(shifted[name], hf[name] + 1.0, atol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(shifted[name], hf[name], err_msg=name)


def test_without_mtp_has_no_headread_tensors(tmp_path):
    stored = read_tensors(write_target_checkpoint(tmp_path / "stripped", mtp=False))
    assert stored and not any(k.startswith("mtp.") for k in stored)


def test_index_maps_mtp_to_last_shard(tiny_sharded_target, tiny_target):
    index = json.loads((tiny_sharded_target / "model.safetensors.index.json").read_text())
    weight_map = index["weight_map"]
    files = sorted(set(weight_map.values()))
    assert files == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert not (tiny_sharded_target / "model.safetensors").exists()
    mtp_files = {f for k, f in weight_map.items() if k.startswith("mtp.")}
    assert mtp_files == {files[-1]}
    for name in files:  # the index tells the truth about every file
        held = load_file(str(tiny_sharded_target / name))
        assert set(held) == {k for k, f in weight_map.items() if f == name}
    unsharded = read_tensors(tiny_target)
    assert set(weight_map) == set(unsharded)
    assert index["metadata"]["total_size"] == sum(v.nbytes for v in unsharded.values())
    for key, value in read_tensors(tiny_sharded_target).items():
        np.testing.assert_array_equal(value, unsharded[key])


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    first = write_target_checkpoint(tmp_path / "a", seed=3, variant="agree")
    second = write_target_checkpoint(tmp_path / "b", seed=3, variant="agree")
    other = write_target_checkpoint(tmp_path / "c", seed=4, variant="agree")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert (first / "model.safetensors").read_bytes() != (other / "model.safetensors").read_bytes()
    d1 = write_drafter_checkpoint(tmp_path / "d1", first, seed=3)
    d2 = write_drafter_checkpoint(tmp_path / "d2", second, seed=3)
    assert (d1 / "model.safetensors").read_bytes() == (d2 / "model.safetensors").read_bytes()


# --- drafter -----------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["random", "agree"])
def test_drafter_has_exactly_the_zlab_keys(which, tiny_drafter, tiny_agree_drafter, tiny_target):
    drafter_dir = tiny_drafter if which == "random" else tiny_agree_drafter
    config = json.loads((drafter_dir / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["model_type"] == "qwen3"
    dflash = config["dflash_config"]
    assert dflash["block_size"] == 4 and dflash["target_layer_ids"] == [0, 2]
    from tokenizers import Tokenizer

    assert dflash["mask_token_id"] == Tokenizer.from_file(str(tiny_target / "tokenizer.json")).token_to_id(MASK)
    h, hd, inter = SPEC.hidden_size, config["head_dim"], config["intermediate_size"]
    nh, nkv = config["num_attention_heads"], config["num_key_value_heads"]
    assert config["hidden_size"] == h and config["vocab_size"] == SPEC.vocab_size
    expected = {"fc.weight": (h, 2 * h), "hidden_norm.weight": (h,), "norm.weight": (h,)}
    for i in range(config["num_hidden_layers"]):
        expected.update({
            f"layers.{i}.input_layernorm.weight": (h,),
            f"layers.{i}.post_attention_layernorm.weight": (h,),
            f"layers.{i}.self_attn.q_proj.weight": (nh * hd, h),
            f"layers.{i}.self_attn.k_proj.weight": (nkv * hd, h),
            f"layers.{i}.self_attn.v_proj.weight": (nkv * hd, h),
            f"layers.{i}.self_attn.o_proj.weight": (h, nh * hd),
            f"layers.{i}.self_attn.q_norm.weight": (hd,),
            f"layers.{i}.self_attn.k_norm.weight": (hd,),
            f"layers.{i}.mlp.gate_proj.weight": (inter, h),
            f"layers.{i}.mlp.up_proj.weight": (inter, h),
            f"layers.{i}.mlp.down_proj.weight": (h, inter),
        })
    stored = load_file(str(drafter_dir / "model.safetensors"))
    assert {k: v.shape for k, v in stored.items()} == expected
    assert abs(float(stored["norm.weight"].mean()) - 1.0) < 0.2, "Qwen3 norms are x·w, stored ≈ 1"


def test_drafter_options(tmp_path, tiny_target):
    path = write_drafter_checkpoint(tmp_path / "d", tiny_target, block_size=8, num_layers=2, target_layer_ids=(0, 1, 3))
    config = json.loads((path / "config.json").read_text())
    assert config["dflash_config"]["block_size"] == 8 and config["num_hidden_layers"] == 2
    stored = load_file(str(path / "model.safetensors"))
    assert stored["fc.weight"].shape == (SPEC.hidden_size, 3 * SPEC.hidden_size)
    assert "layers.1.mlp.down_proj.weight" in stored
    with pytest.raises(ValueError):
        write_drafter_checkpoint(tmp_path / "bad", tiny_target, target_layer_ids=(0, 9))


# --- behaviour of the variants (what the speculative-engine tests rely on) ----------------------


def test_agree_family_agrees_often_but_not_always(tiny_agree_target, tiny_agree_drafter):
    from engines.testing.measure import PROMPTS, measure_family

    stats = measure_family(tiny_agree_target, tiny_agree_drafter, prompts=PROMPTS[:8], max_tokens=48)
    assert 0.2 < stats.a_fraction < 0.9 and stats.distinct_non_a >= 15, stats
    assert 0.5 < stats.bigram_dominance < 0.97, stats
    assert 0.5 < stats.mtp_accept < 0.97, stats  # accepts and rejects both common
    assert stats.dflash_zero_accept > 0.2 and stats.dflash_full_accept > 0.05, stats  # rejects and deep accepts
    assert stats.mean_max_prob > 0.25, stats


def test_random_family_mostly_disagrees(tiny_target, tiny_drafter):
    from engines.testing.measure import PROMPTS, measure_family

    stats = measure_family(tiny_target, tiny_drafter, prompts=PROMPTS[:4], max_tokens=32)
    assert stats.mtp_accept < 0.3 and stats.dflash_mean_accept < 0.3, stats
    assert stats.distinct_non_a >= 20, stats


# --- the demo family and the package's import surface -------------------------------------------


def test_write_demo_family_is_idempotent_and_loads(tmp_path):
    from engines.testing import write_demo_family

    family = write_demo_family(tmp_path / "demo")
    target, drafter = family / "target", family / "drafter"
    assert (target / "config.json").exists() and (drafter / "config.json").exists()
    stamp_mtime = (family / "family.json").stat().st_mtime_ns
    weights_mtime = (target / "model.safetensors").stat().st_mtime_ns
    assert write_demo_family(tmp_path / "demo") == family
    assert (family / "family.json").stat().st_mtime_ns == stamp_mtime
    assert (target / "model.safetensors").stat().st_mtime_ns == weights_mtime
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]  # no staging directory left behind
    (family / "family.json").write_text("{}")  # a stale stamp regenerates
    write_demo_family(tmp_path / "demo")
    assert json.loads((family / "family.json").read_text())["variant"] == "agree"
    model, _ = _load(target)
    assert json.loads((drafter / "config.json").read_text())["hidden_size"] == model.args.text_config["hidden_size"]


def test_importing_engines_testing_does_not_import_mlx():
    import subprocess
    import sys

    code = "import sys, engines.testing; assert not any(m == 'mlx' or m.startswith('mlx.') for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parent.parent)


def test_rewriting_a_directory_leaves_no_stale_shards(tmp_path):
    path = write_target_checkpoint(tmp_path / "t", shards=3)
    assert len(list(path.glob("model-*.safetensors"))) == 3
    write_target_checkpoint(path)
    assert sorted(p.name for p in path.glob("model*")) == ["model.safetensors"]
