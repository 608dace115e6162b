"""DFlash block drafter in the z-lab checkpoint format (docs/design.md "DFlash drafter").

Context features are target decoder-layer outputs at `target_layer_ids`, fused once by
hidden_norm(fc(concat)) and shared by every drafter layer. The drafter caches only context K/V
(RoPE'd at absolute positions), so it never rolls back: accepted rows are appended after a verify
(the pipelined cycle appends every slot of the tree in path order and marks the rejected ones as
holes, so the host never reads how many were accepted).
A draft feeds [bonus, MASK × (bs − 1)] embedded with the TARGET's embeddings; the block attends to
all context rows and, in full-attention layers, to every block row (non-causal).
"""

from __future__ import annotations

import json
from itertools import accumulate
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models.base import scaled_dot_product_attention
from mlx_lm.models.rope_utils import initialize_rope

from contracts.errors import ModelLoadError

from .bundle import ModelBundle
from .dflash_config import DrafterConfig
from .kernels.attention import ops_attention, use_ops_attention
from .rows import EVERY_ROW, HeldRows, Rows, Window


class DraftAttention(nn.Module):
    def __init__(self, cfg: DrafterConfig, sliding: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.scale = cfg.head_dim**-0.5
        self.q_proj = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = nn.RMSNorm(self.head_dim, eps=cfg.rms_norm_eps)
        self.k_norm = nn.RMSNorm(self.head_dim, eps=cfg.rms_norm_eps)
        self.rope = initialize_rope(self.head_dim, base=cfg.rope.theta, traditional=False,
                                    scaling_config=cfg.rope.scaling, max_position_embeddings=cfg.max_position_embeddings)
        self.sliding_window = cfg.sliding_window if sliding else None  # sliding layers are causal

    def keys_values(self, x: mx.array, offset: int) -> tuple[mx.array, mx.array]:
        B, L, _ = x.shape
        keys = self.k_norm(self.k_proj(x).reshape(B, L, self.kv_heads, -1)).transpose(0, 2, 1, 3)
        values = self.v_proj(x).reshape(B, L, self.kv_heads, -1).transpose(0, 2, 1, 3)
        return self.rope(keys, offset=offset), values

    def __call__(self, h: mx.array, ctx_keys: mx.array, ctx_values: mx.array, ctx_positions: mx.array,
                 offset: int | mx.array, ctx_valid: mx.array | None = None) -> mx.array:
        B, L, _ = h.shape
        queries = self.rope(self.q_norm(self.q_proj(h).reshape(B, L, self.heads, -1)).transpose(0, 2, 1, 3), offset=offset)
        block_keys, block_values = self.keys_values(h, offset)
        keys = mx.concatenate([ctx_keys, block_keys], axis=2)
        values = mx.concatenate([ctx_values, block_values], axis=2)
        mask = None
        if self.sliding_window is not None:
            q_pos = (offset + mx.arange(L))[:, None]
            k_pos = mx.concatenate([ctx_positions, offset + mx.arange(L)])[None]
            mask = (k_pos <= q_pos) & (q_pos - k_pos < self.sliding_window)
        if ctx_valid is not None:   # context rows of rejected tree slots (the pipelined cycle) are holes
            visible = mx.broadcast_to(mx.concatenate([ctx_valid, mx.ones((L,), dtype=mx.bool_)])[None], (L, keys.shape[2]))
            mask = visible if mask is None else mask & visible
        if use_ops_attention(queries):  # no per-shape cuDNN graph on MLX-CUDA (kernels/attention.py)
            out = ops_attention(queries, keys, values, self.scale, mask)
        else:
            out = scaled_dot_product_attention(queries, keys, values, cache=None, scale=self.scale, mask=mask)
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1))


class DraftMLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig, layer_type: str):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.self_attn = DraftAttention(cfg, sliding=layer_type == "sliding_attention")
        self.post_attention_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.mlp = DraftMLP(cfg.hidden_size, cfg.intermediate_size)


class DraftContext:
    """Per-request drafter cache: context K/V per layer, with an optional sink + window bound."""

    def __init__(self, layers: int, sink: int = 0, window: int | None = None):
        self.keys: list[mx.array | None] = [None] * layers
        self.values: list[mx.array | None] = [None] * layers
        self.positions = mx.zeros((0,), dtype=mx.int32)
        # committed positions seen (the next context row's position): a device scalar once the pipelined
        # cycle appends rows, since it appends every tree slot and marks the rejected ones in `valid`
        self.length: int | mx.array = 0
        self.valid: mx.array | None = None   # per row, None while every row is valid
        self.sink, self.window = sink, window

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (*self.keys, *self.values, self.valid) if a is not None) + self.positions.nbytes

    def append(self, layer: int, keys: mx.array, values: mx.array) -> None:
        old_k, old_v = self.keys[layer], self.values[layer]
        self.keys[layer] = keys if old_k is None else mx.concatenate([old_k, keys], axis=2)
        self.values[layer] = values if old_v is None else mx.concatenate([old_v, values], axis=2)

    @property
    def bound(self) -> Window:
        """The rows of a prompt the context keeps: its sink and its window."""
        return Window(self.sink, self.window) if self.window is not None else EVERY_ROW

    def rows(self) -> list[Rows]:
        """Every layer's keys and values as rows of the prompt so far (rows first; its sink and window held):
        what the prefix cache stores. A context of committed rows only (a prefill's)."""
        total = int(self.length)
        spans = self.bound.spans(0, total, total)
        rows = [mx.moveaxis(array, 2, 0) for array in (*self.keys, *self.values)]
        if spans == [(0, total)]:
            return rows
        cuts = list(accumulate(b - a for a, b in spans))[:-1]
        return [HeldRows(total, tuple(zip((a for a, _ in spans), mx.split(r, cuts) if cuts else [r]))) for r in rows]

    @classmethod
    def from_rows(cls, rows: list[Rows], sink: int, window: int | None) -> DraftContext:
        """The context `rows()` gave (each layer's keys, then each layer's values)."""
        layers = len(rows) // 2
        context = cls(layers, sink, window)
        total = rows[0].shape[0]
        spans = context.bound.spans(0, total, total)
        parts = [[r[a:b] for a, b in spans] for r in rows]
        stacked = [mx.moveaxis(p[0] if len(p) == 1 else mx.concatenate(p), 0, 2) for p in parts]
        context.keys, context.values = stacked[:layers], stacked[layers:]
        context.positions = mx.concatenate([mx.arange(a, b, dtype=mx.int32) for a, b in spans]) if spans \
            else mx.zeros((0,), dtype=mx.int32)
        context.length = total
        return context

    def trim(self) -> None:
        """Keep the first `sink` rows and the last `window` rows (long prompts)."""
        if self.window is None or self.positions.shape[0] <= self.sink + self.window:
            return
        keep = mx.concatenate([mx.arange(self.sink), mx.arange(self.positions.shape[0] - self.window, self.positions.shape[0])])
        self.positions = self.positions[keep]
        self.valid = self.valid[keep] if self.valid is not None else None
        self.keys = [k[:, :, keep] for k in self.keys]
        self.values = [v[:, :, keep] for v in self.values]


class DFlashDrafter(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(len(cfg.target_layer_ids) * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.layers = [DraftLayer(cfg, t) for t in cfg.layer_types]
        self.norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def new_context(self, sink: int = 0, window: int | None = None) -> DraftContext:
        return DraftContext(len(self.layers), sink, window)

    def add_context(self, features: list[mx.array], context: DraftContext, valid: mx.array | None = None) -> None:
        """Append committed rows: `features` are the target layer outputs (T, H) in target_layer_ids order.
        `valid` (T,) bool, leading rows True: only those are committed (the rest are holes, masked)."""
        ctx = self.hidden_norm(self.fc(mx.concatenate(features, axis=-1)))[None]
        rows = ctx.shape[1]
        for i, layer in enumerate(self.layers):
            keys, values = layer.self_attn.keys_values(ctx, context.length)
            context.append(i, keys, values)
        context.positions = mx.concatenate([context.positions, (context.length + mx.arange(rows)).astype(mx.int32)])
        if valid is not None or context.valid is not None:
            before = context.valid if context.valid is not None else mx.ones((context.positions.shape[0] - rows,), mx.bool_)
            context.valid = mx.concatenate([before, valid if valid is not None else mx.ones((rows,), mx.bool_)])
        context.length = context.length + (valid.astype(mx.int32).sum() if valid is not None else rows)
        context.trim()

    def __call__(self, block_embeds: mx.array, context: DraftContext) -> mx.array:
        """Final-norm states (bs, H) of the block placed at positions context.length..; rows 1..
        predict the tokens after the bonus (feed them to the target's lm_head)."""
        h = block_embeds[None]
        for i, layer in enumerate(self.layers):
            r = layer.self_attn(layer.input_layernorm(h), context.keys[i], context.values[i], context.positions,
                                context.length, context.valid)
            h = h + r
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.norm(h)[0]

    def nbytes(self) -> int:
        return sum(v.nbytes for _, v in tree_flatten(self.parameters()))


def load_drafter(path: str | Path, bundle: ModelBundle) -> DFlashDrafter:
    directory = Path(path).expanduser()
    config_file = directory / "config.json"
    if not config_file.exists():
        raise ModelLoadError(f"drafter directory {directory} has no config.json")
    raw = json.loads(config_file.read_text())
    if "DFlashDraftModel" not in raw.get("architectures", []):
        raise ModelLoadError(f"{directory} is not a DFlash drafter (architectures lacks DFlashDraftModel)")
    cfg = DrafterConfig.from_dict(raw)
    n_target = len(bundle.layers)
    if cfg.hidden_size != bundle.hidden_size:
        raise ModelLoadError(f"drafter hidden_size {cfg.hidden_size} != target hidden_size {bundle.hidden_size}")
    if not cfg.target_layer_ids or max(cfg.target_layer_ids) >= n_target or min(cfg.target_layer_ids) < 0:
        raise ModelLoadError(f"drafter target_layer_ids {cfg.target_layer_ids} out of range for a {n_target}-layer target")
    if not 0 <= cfg.mask_token_id < bundle.embed_tokens.weight.shape[0]:
        raise ModelLoadError(f"drafter mask_token_id {cfg.mask_token_id} is outside the target vocabulary")
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"drafter directory {directory} holds no *.safetensors")
    weights: dict[str, mx.array] = {}
    for file in files:
        weights.update(mx.load(str(file)))
    weights = {k.removeprefix("model."): v.astype(bundle.dtype) for k, v in weights.items()}
    drafter = DFlashDrafter(cfg)
    try:
        drafter.load_weights(list(weights.items()), strict=True)
    except ValueError as exc:
        raise ModelLoadError(f"drafter weights in {directory} do not match its config: {exc}") from exc
    drafter.eval()
    mx.eval(drafter.parameters())
    return drafter
