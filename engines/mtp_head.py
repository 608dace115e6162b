"""The checkpoint's own MTP head (docs/design.md "MTP head"), loaded beside the target without copying it.

mlx-lm's qwen3_5 sanitize drops every `mtp.` tensor, so they are read here straight from the
safetensors (only the shards that hold them) and put into a head built from mlx-lm's own
decoder-layer class. The head references the target's embed_tokens and lm_head.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models import qwen3_5
from mlx_lm.models.cache import KVCache

from contracts.errors import ModelLoadError

from .bundle import ModelBundle
from .checkpoint import MTP_PREFIX, is_mtp_tensor, mtp_layer_count, mtp_weight_files, read_config
from .target import Cursor, attention_device, attention_tree, device_mask
from .tree import DeviceTree, TreeLayout

_UNQUANTIZED = ("fc",)  # fc stays in full precision, like the norms


class MTPHead(nn.Module):
    def __init__(self, args: qwen3_5.TextModelArgs, num_layers: int):
        super().__init__()
        hidden = args.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        self.pre_fc_norm_embedding = nn.RMSNorm(hidden, eps=args.rms_norm_eps)
        self.pre_fc_norm_hidden = nn.RMSNorm(hidden, eps=args.rms_norm_eps)
        # layer_idx = interval - 1 makes mlx-lm build a full-attention layer
        self.layers = [qwen3_5.DecoderLayer(args, args.full_attention_interval - 1) for _ in range(num_layers)]
        self.norm = nn.RMSNorm(hidden, eps=args.rms_norm_eps)

    def __call__(self, embeds: mx.array, hidden: mx.array, cache: KVCache, cursor: Cursor | None = None) -> mx.array:
        """Row t: embeds = embed(x[t+1]), hidden = target's final-norm hidden at t; position t.
        Returns final-norm states for the target's lm_head (they predict x[t+2]). With a cursor the
        rows go in at its device position (the pipelined cycle); the caller advances it."""
        u = self.fc(mx.concatenate([self.pre_fc_norm_embedding(embeds), self.pre_fc_norm_hidden(hidden)], axis=-1))
        rows = TreeLayout.chain(u.shape[1])
        on_device = DeviceTree.of(rows, 1) if cursor is not None else None
        width = cursor.bound + rows.size if cursor is not None else 0
        mask = device_mask(on_device, cursor.pos, width) if cursor is not None else None
        for layer in self.layers:
            # the target's attention (not the layer's own call): an accepted pair is 2 queries at a new
            # key length each cycle, which MLX-CUDA's fused op would build a cuDNN graph for
            normed = layer.input_layernorm(u)
            if cursor is None:
                h = u + attention_tree(layer.self_attn, normed, cache, rows)
            else:
                h = u + attention_device(layer.self_attn, normed, cache, on_device, cursor.pos, width, mask)[0]
            u = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.norm(u)

    def nbytes(self) -> int:
        return sum(v.nbytes for _, v in tree_flatten(self.parameters()))


def read_mtp_tensors(source: Path) -> dict[str, mx.array]:
    """`mtp.*` tensors from a checkpoint dir or a single sidecar .safetensors file, names
    normalised to be relative to the head (`fc.weight`, `layers.0.self_attn.q_proj.weight`, ...)."""
    files = [source] if source.is_file() else mtp_weight_files(source)
    tensors: dict[str, mx.array] = {}
    for file in files:
        for name, value in mx.load(str(file)).items():
            if is_mtp_tensor(name):
                tensors[name[name.find(MTP_PREFIX) + len(MTP_PREFIX):]] = value
    return tensors


def _is_norm(name: str, value: mx.array) -> bool:
    """RMSNorm weights: `norm`, `*_layernorm`, `q_norm`, `pre_fc_norm_embedding`, ... (1-D)."""
    parts = name.split(".")
    return value.ndim == 1 and parts[-1] == "weight" and len(parts) > 1 and "norm" in parts[-2]


def stack_experts(tensors: dict[str, mx.array]) -> dict[str, mx.array]:
    """HF MoE expert weights -> mlx-lm's SwitchGLU layout (`mlp.switch_mlp.{gate,up,down}_proj`).

    Accepts the fused Qwen3.5-MoE layout (`experts.gate_up_proj` [E, 2I, H], `experts.down_proj`)
    and the per-expert one (`experts.{e}.gate_proj.weight`, ...), as mlx-lm's sanitize does for
    the target's own layers."""
    out: dict[str, mx.array] = {}
    per_expert: dict[tuple[str, str], dict[int, mx.array]] = {}
    for name, value in tensors.items():
        prefix, sep, rest = name.partition(".mlp.experts.")
        if not sep:
            out[name] = value
        elif rest == "gate_up_proj":
            half = value.shape[-2] // 2
            out[f"{prefix}.mlp.switch_mlp.gate_proj.weight"] = value[..., :half, :]
            out[f"{prefix}.mlp.switch_mlp.up_proj.weight"] = value[..., half:, :]
        elif rest == "down_proj":
            out[f"{prefix}.mlp.switch_mlp.down_proj.weight"] = value
        else:  # "{e}.gate_proj.weight"
            expert, projection = rest.split(".", 1)
            per_expert.setdefault((prefix, projection), {})[int(expert)] = value
    for (prefix, projection), experts in per_expert.items():
        out[f"{prefix}.mlp.switch_mlp.{projection}"] = mx.stack([experts[e] for e in sorted(experts)])
    return out


def _zero_centred(tensors: dict[str, mx.array]) -> bool:
    """HF checkpoints store RMSNorm weights around 0 (x * (1 + w)); MLX's RMSNorm computes x * w."""
    norms = [v for k, v in tensors.items() if _is_norm(k, v)]
    if not norms:
        return False
    mean = float(mx.mean(mx.concatenate([n.astype(mx.float32) for n in norms])).item())
    return abs(mean) < abs(mean - 1.0)


def load_mtp_head(bundle: ModelBundle, weights: str | Path | None = None) -> MTPHead:
    """Build the head for `bundle` from its own checkpoint (or `weights`: a dir or sidecar file)."""
    source = Path(weights) if weights is not None else bundle.path
    config = bundle.config if weights is None or Path(weights).is_file() else read_config(Path(weights))
    num_layers = mtp_layer_count(config) or mtp_layer_count(bundle.config)
    tensors = read_mtp_tensors(source) if source.exists() else {}
    if num_layers == 0 or not tensors:
        raise ModelLoadError(
            f"{source} has no MTP head (no `mtp.*` tensors or no mtp_num_hidden_layers in config.json). "
            "MLX community conversions strip them: point --mtp-weights at the original Hugging Face "
            "checkpoint directory (or a .safetensors sidecar holding its mtp.* tensors)."
        )
    args = bundle.language_model.args
    if args.num_experts > 0:
        tensors = stack_experts(tensors)
    head = MTPHead(args, num_layers)

    quantization = bundle.config.get("quantization") or bundle.config.get("quantization_config")
    prequantized = any(k.endswith(".scales") for k in tensors)
    host_predicate = bundle.language_model.quant_predicate
    if quantization and prequantized:
        _quantize_layers(head, quantization, host_predicate)

    if _zero_centred(tensors):
        tensors = {k: (v + 1.0 if _is_norm(k, v) else v) for k, v in tensors.items()}
    tensors = {k: v.astype(bundle.dtype) if mx.issubdtype(v.dtype, mx.floating) else v for k, v in tensors.items()}
    try:
        head.load_weights(list(tensors.items()), strict=True)
    except ValueError as exc:
        raise ModelLoadError(f"MTP tensors in {source} do not match the target's config: {exc}") from exc

    if quantization and not prequantized:
        _quantize_layers(head, quantization, host_predicate)
    head.eval()
    mx.eval(head.parameters())
    return head


def _quantize_layers(head: MTPHead, quantization: dict, host_predicate=None) -> None:
    """Quantize the decoder layer like the host model (its MoE gates at the host's own settings);
    fc and norms stay unquantized."""

    def predicate(path: str, module: nn.Module):
        if path in _UNQUANTIZED or not hasattr(module, "to_quantized"):
            return False
        return host_predicate(path, module) if host_predicate is not None else True

    nn.quantize(
        head,
        group_size=int(quantization.get("group_size", 64)),
        bits=int(quantization.get("bits", 4)),
        class_predicate=predicate,
    )
