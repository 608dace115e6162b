"""Measure how a generated test family behaves: peakedness, A-runs, bigram dominance, and how
often its MTP head and DFlash drafter agree with the target's greedy stream.

Used to tune agree.AgreeKnobs and by tests/test_checkpoints.py. The head and drafter forwards
here are small teacher-forced references over a whole sequence (no caches), independent of the
engines, written straight from docs/design.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.qwen3_5 import DecoderLayer, TextModelArgs
from safetensors.numpy import load_file

from engines.testing.hf_layout import is_zero_centred

PROMPTS: tuple[str, ...] = (
    "Write a Python function that reverses a linked list.",
    "Tell me a short story about a lighthouse keeper.",
    "Convert this to JSON: name Alice, age 30, city Paris.",
    "What is the capital of France?",
    "SELECT name FROM users WHERE age > 30; explain this query.",
    "Summarise the plot of Pride and Prejudice in two sentences.",
    "def fib(n):\n    if n < 2:\n        return n",
    "List five fruits as a YAML sequence.",
    "Why is the sky blue?",
    "Translate 'good morning' into French, German and Spanish.",
    "Write a haiku about autumn rain.",
    "id,name,score\n1,Bob,90\n2,Ann,85\nAdd a third row.",
    "Explain recursion to a ten year old.",
    "How do I install a package with pip?",
    "中文文本测试，你好世界。",
    "Give me a regular expression that matches an email address.",
    "The quick brown fox jumps over the lazy dog. Continue the text.",
    "{\"model\": \"switchyard\", \"stream\": true}",
    "Compute 12 * 34 and show your work.",
    "Describe the water cycle.",
)


@dataclass
class FamilyStats:
    mean_max_prob: float  # target's mean top-1 probability along its greedy streams
    frac_max_prob_over_0_3: float
    a_fraction: float  # share of generated tokens that are the A token
    distinct_non_a: int  # distinct non-A tokens generated
    mean_a_run: float  # mean length of maximal A-runs
    bigram_dominance: float  # P(target greedy next == f(current)) with f from embed→norm→lm_head
    mtp_accept: float | None  # P(head's argmax at t == target token at t+2)
    dflash_mean_accept: float | None  # mean accepted chain length of a (bs−1)-token drafter block
    dflash_zero_accept: float | None  # share of drafter steps that accept nothing
    dflash_full_accept: float | None  # share that accept the whole block


def greedy_streams(model, tokenizer, prompts=PROMPTS, max_tokens: int = 64) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, generated ids) per prompt: mlx-lm's own greedy decode of the chat-templated prompt."""
    from mlx_lm.generate import generate_step

    streams = []
    for text in prompts:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        out = []
        for token, _ in generate_step(mx.array(prompt), model, max_tokens=max_tokens):
            out.append(int(token))
        streams.append((list(prompt), out))
    return streams


def _text_model(model):
    return model.language_model if hasattr(model, "language_model") else model


def layer_outputs(model, ids: list[int]) -> tuple[list[mx.array], mx.array]:
    """Every decoder layer's output (residual stream) and the final normed hidden, one forward."""
    inner = _text_model(model).model
    h = inner.embed_tokens(mx.array([ids]))
    outputs = []
    for layer in inner.layers:
        h = layer(h, mask="causal" if not layer.is_linear else None, cache=None)
        outputs.append(h)
    return outputs, inner.norm(h)


def bigram_table(model) -> np.ndarray:
    """f(x) = argmax lm_head(norm(embed(x))) for every token x."""
    text = _text_model(model)
    logits = text.lm_head(text.model.norm(text.model.embed_tokens.weight))
    return np.array(mx.argmax(logits, axis=-1))


class ReferenceMtpHead:
    """The MTP forward of docs/design.md, teacher-forced over a whole sequence."""

    def __init__(self, model_dir: Path, model):
        config = json.loads((model_dir / "config.json").read_text())
        args = TextModelArgs.from_dict(config.get("text_config", config))
        self.layer = DecoderLayer(args, layer_idx=args.full_attention_interval - 1)
        tensors = read_tensors(model_dir, "mtp.")
        shift = float(np.mean(tensors["mtp.norm.weight"])) < 0.5  # HF zero-centred → +1
        weights = {}
        for name, value in tensors.items():
            if shift and is_zero_centred(name):
                value = value + 1.0
            weights[name[len("mtp."):]] = mx.array(value.astype(np.float32))
        self.fc = weights.pop("fc.weight")
        self.norm_e = weights.pop("pre_fc_norm_embedding.weight")
        self.norm_h = weights.pop("pre_fc_norm_hidden.weight")
        self.norm = weights.pop("norm.weight")
        self.layer.load_weights([(k[len("layers.0."):], v) for k, v in weights.items()], strict=True)
        self.eps = args.rms_norm_eps
        self.text = _text_model(model)

    def logits(self, next_ids: list[int], hidden: mx.array) -> mx.array:
        """Row i: head logits from (x[i+1], H[i]); `hidden` is the target's final normed hidden."""
        e = mx.fast.rms_norm(self.text.model.embed_tokens(mx.array([next_ids])), self.norm_e, self.eps)
        hn = mx.fast.rms_norm(hidden, self.norm_h, self.eps)
        u = mx.concatenate([e, hn], axis=-1) @ self.fc.T
        u = self.layer(u, mask="causal", cache=None)
        return self.text.lm_head(mx.fast.rms_norm(u, self.norm, self.eps))


def reference_rope_frequencies(config: dict) -> tuple[np.ndarray, float]:
    """(inverse frequencies (head_dim/2,), attention factor) of a drafter config, from the published
    formulas (transformers' default and YaRN RoPE), independent of mlx-lm's RoPE modules."""
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    base = float(config.get("rope_theta") or params["rope_theta"])
    dim = config["head_dim"]
    inv_freq = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind == "default":
        return inv_freq, 1.0
    if kind == "linear":
        return inv_freq / params["factor"], 1.0
    assert kind == "yarn", kind
    factor = float(params["factor"])
    original = params.get("original_max_position_embeddings") or config["max_position_embeddings"]

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if params.get("mscale") and params.get("mscale_all_dim"):
        attention = mscale(factor, params["mscale"]) / mscale(factor, params["mscale_all_dim"])
    else:
        attention = mscale(factor)

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(params.get("beta_fast", 32))), 0)
    high = min(math.ceil(correction_dim(params.get("beta_slow", 1))), dim - 1)
    ramp = np.clip((np.arange(dim // 2) - low) / ((high - low) or 0.001), 0, 1)
    extrapolation = 1 - ramp                       # high-frequency dims keep their frequency
    inv_freq = (inv_freq / factor) * (1 - extrapolation) + inv_freq * extrapolation
    return inv_freq, attention


def reference_rope(x: mx.array, positions: np.ndarray, inv_freq: np.ndarray, attention: float) -> mx.array:
    """Rotate-half RoPE of x (B, H, T, D) at `positions` (T,), scaled by the attention factor."""
    angles = positions[:, None].astype(np.float64) * inv_freq[None]
    cos = mx.array(np.concatenate([np.cos(angles)] * 2, axis=-1) * attention, dtype=mx.float32)
    sin = mx.array(np.concatenate([np.sin(angles)] * 2, axis=-1) * attention, dtype=mx.float32)
    half = x.shape[-1] // 2
    rotated = mx.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


class ReferenceDrafter:
    """The DFlash drafter forward of docs/design.md for one block, over an explicit context."""

    def __init__(self, drafter_dir: Path, model):
        self.config = json.loads((drafter_dir / "config.json").read_text())
        stored = load_file(str(drafter_dir / "model.safetensors"))
        self.w = {k: mx.array(v.astype(np.float32)) for k, v in stored.items()}
        c = self.config
        self.block_size = c["dflash_config"]["block_size"]
        self.layer_ids = c["dflash_config"]["target_layer_ids"]
        self.mask_id = c["dflash_config"]["mask_token_id"]
        self.eps = c["rms_norm_eps"]
        self.inv_freq, self.attention_factor = reference_rope_frequencies(c)
        self.text = _text_model(model)

    def context(self, outputs: list[mx.array]) -> mx.array:
        feats = mx.concatenate([outputs[i] for i in self.layer_ids], axis=-1)
        return mx.fast.rms_norm(feats @ self.w["fc.weight"].T, self.w["hidden_norm.weight"], self.eps)

    def block_logits(self, ctx: mx.array, bonus: int) -> mx.array:
        """Logits of the bs−1 positions after `bonus`; ctx: (1, P, H) fused features of 0..P−1."""
        c, w, eps = self.config, self.w, self.eps
        nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        p = ctx.shape[1]
        x = self.text.model.embed_tokens(mx.array([[bonus] + [self.mask_id] * (self.block_size - 1)]))
        for i in range(c["num_hidden_layers"]):
            pre = f"layers.{i}."
            h = mx.fast.rms_norm(x, w[pre + "input_layernorm.weight"], eps)
            kv_in = mx.concatenate([ctx, h], axis=1)
            q = (h @ w[pre + "self_attn.q_proj.weight"].T).reshape(1, -1, nh, hd)
            k = (kv_in @ w[pre + "self_attn.k_proj.weight"].T).reshape(1, -1, nkv, hd)
            v = (kv_in @ w[pre + "self_attn.v_proj.weight"].T).reshape(1, -1, nkv, hd)
            q = mx.fast.rms_norm(q, w[pre + "self_attn.q_norm.weight"], eps).transpose(0, 2, 1, 3)
            k = mx.fast.rms_norm(k, w[pre + "self_attn.k_norm.weight"], eps).transpose(0, 2, 1, 3)
            v = v.transpose(0, 2, 1, 3)
            q = reference_rope(q, np.arange(p, p + self.block_size), self.inv_freq, self.attention_factor)
            k = reference_rope(k, np.arange(p + self.block_size), self.inv_freq, self.attention_factor)
            att = mx.fast.scaled_dot_product_attention(q, k, v, scale=hd**-0.5)  # non-causal
            x = x + att.transpose(0, 2, 1, 3).reshape(1, self.block_size, -1) @ w[pre + "self_attn.o_proj.weight"].T
            h = mx.fast.rms_norm(x, w[pre + "post_attention_layernorm.weight"], eps)
            gate = h @ w[pre + "mlp.gate_proj.weight"].T
            x = x + (nn.silu(gate) * (h @ w[pre + "mlp.up_proj.weight"].T)) @ w[pre + "mlp.down_proj.weight"].T
        out = mx.fast.rms_norm(x, w["norm.weight"], eps)
        return self.text.lm_head(out)[0, 1:]


def read_tensors(model_dir: Path, prefix: str = "") -> dict[str, np.ndarray]:
    """Every stored tensor of a checkpoint dir (all shards) whose name starts with `prefix`."""
    index = model_dir / "model.safetensors.index.json"
    files = ["model.safetensors"]
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    out: dict[str, np.ndarray] = {}
    for name in files:
        out.update({k: v for k, v in load_file(str(model_dir / name)).items() if k.startswith(prefix)})
    return out


def _runs(tokens: list[int], a_id: int) -> list[int]:
    runs, current = [], 0
    for t in tokens + [-1]:
        if t == a_id:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs


def measure_family(target_dir: str | Path, drafter_dir: str | Path | None = None, *, a_id: int | None = None,
                   prompts=PROMPTS, max_tokens: int = 64) -> FamilyStats:
    import mlx_lm

    target_dir = Path(target_dir)
    model, tokenizer = mlx_lm.load(str(target_dir))
    if a_id is None:
        a_id = tokenizer.convert_tokens_to_ids("Ġthe")
    streams = greedy_streams(model, tokenizer, prompts, max_tokens)
    f = bigram_table(model)
    head = ReferenceMtpHead(target_dir, model) if _has_mtp(target_dir) else None
    drafter = ReferenceDrafter(Path(drafter_dir), model) if drafter_dir else None

    max_probs, generated, runs = [], [], []
    bigram_hits = bigram_total = mtp_hits = mtp_total = 0
    accepts: list[int] = []
    for prompt, out in streams:
        seq = prompt + out
        outputs, final = layer_outputs(model, seq)
        logits = _text_model(model).lm_head(final)[0]
        probs = mx.softmax(logits[len(prompt) - 1:-1], axis=-1)
        max_probs.extend(np.array(mx.max(probs, axis=-1)).tolist())
        generated.extend(out)
        runs.extend(_runs(out, a_id))
        n0 = len(prompt) - 1  # position whose output is the first generated token
        for t in range(n0, len(seq) - 1):
            bigram_hits += int(f[seq[t]] == seq[t + 1])
            bigram_total += 1
        if head is not None:
            head_pred = np.array(mx.argmax(head.logits(seq[1:], final[:, :-1]), axis=-1))[0]
            for t in range(n0, len(seq) - 2):  # head row t drafts position t+2
                mtp_hits += int(head_pred[t] == seq[t + 2])
                mtp_total += 1
        if drafter is not None:
            ctx_all = drafter.context(outputs)
            for p in range(len(prompt), len(seq) - drafter.block_size + 1):
                draft = np.array(mx.argmax(drafter.block_logits(ctx_all[:, :p], seq[p]), axis=-1)).tolist()
                n = 0
                while n < len(draft) and draft[n] == seq[p + 1 + n]:
                    n += 1
                accepts.append(n)

    max_probs_np = np.array(max_probs)
    n_draft = (drafter.block_size - 1) if drafter else 0
    return FamilyStats(
        mean_max_prob=float(max_probs_np.mean()),
        frac_max_prob_over_0_3=float((max_probs_np > 0.3).mean()),
        a_fraction=float(np.mean(np.array(generated) == a_id)),
        distinct_non_a=len(set(generated) - {a_id}),
        mean_a_run=float(np.mean(runs)) if runs else 0.0,
        bigram_dominance=bigram_hits / max(bigram_total, 1),
        mtp_accept=(mtp_hits / mtp_total) if head is not None else None,
        dflash_mean_accept=float(np.mean(accepts)) if accepts else None,
        dflash_zero_accept=float(np.mean(np.array(accepts) == 0)) if accepts else None,
        dflash_full_accept=float(np.mean(np.array(accepts) == n_draft)) if accepts else None,
    )


def _has_mtp(model_dir: Path) -> bool:
    return bool(read_tensors(model_dir, "mtp.norm.weight"))


if __name__ == "__main__":
    import sys

    stats = measure_family(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    print(json.dumps(asdict(stats), indent=2))
