"""DFlash block drafter (z-lab checkpoint layout) in PyTorch, for training.

Semantics (what the MLX engine implements at inference):
  ctx  = hidden_norm(fc(concat[target layer outputs at target_layer_ids]))   rows 0..P-1
  x    = target.embed_tokens([bonus, MASK x (bs-1)])                          rows at positions P..P+bs-1
  per layer: h = input_layernorm(x)
             q = q_norm(q_proj(h)); k = k_norm(k_proj([ctx; h])); v = v_proj([ctx; h])
             RoPE (full head_dim, rotate-half) at absolute positions; attention NOT causal
             x = x + o_proj(attn); x = x + mlp(post_attention_layernorm(x))
  logits = target.lm_head(norm(x)); block row i (1..bs-1) predicts the token at position P+i.
Norms are Qwen3's plain RMSNorm (x*w), stored as such. The config is read by the engine's own reader
(engines.dflash_config.DrafterConfig): one reading of the z-lab schema, its refusals included.

Training packs many blocks of one sequence into one attention call: queries are the blocks'
rows, keys are [ctx rows of the whole sequence ; all block rows], and a boolean mask lets block a
see ctx rows j < P_a (and j >= P_a - window) and its own block rows only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engines.dflash_config import DrafterConfig


def drafter_config(raw: dict | DrafterConfig) -> DrafterConfig:
    """The engine's reading of a drafter config.json dict, limited to what this module implements:
    default RoPE, full-attention layers, one layer per `layer_types` entry."""
    cfg = raw if isinstance(raw, DrafterConfig) else DrafterConfig.from_dict(raw)
    if cfg.rope.scaling is not None:
        raise ValueError(f"the training drafter implements default RoPE only, not {cfg.rope.describe()}")
    if set(cfg.layer_types) != {"full_attention"} or len(cfg.layer_types) != cfg.num_hidden_layers:
        raise ValueError(f"layer_types {list(cfg.layer_types)} must be {cfg.num_hidden_layers} x full_attention "
                         "(the engine builds one layer per entry)")
    return cfg


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).type_as(x)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        hidden, heads, kv_heads, head_dim = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, \
            cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.q_norm = RMSNorm(head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(head_dim, cfg.rms_norm_eps)

    def forward(self, h: torch.Tensor, ctx: torch.Tensor, rope_q, rope_kv, mask: torch.Tensor) -> torch.Tensor:
        batch, rows, _ = h.shape
        kv_in = torch.cat([ctx, h], dim=1)
        q = self.q_norm(self.q_proj(h).view(batch, rows, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(kv_in).view(batch, kv_in.shape[1], self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(kv_in).view(batch, kv_in.shape[1], self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, *rope_q), apply_rope(k, *rope_kv)
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(batch, rows, -1))


class Mlp(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = Mlp(cfg)

    def forward(self, x, ctx, rope_q, rope_kv, mask):
        x = x + self.self_attn(self.input_layernorm(x), ctx, rope_q, rope_kv, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    def __init__(self, raw: dict | DrafterConfig) -> None:
        super().__init__()
        self.cfg = cfg = drafter_config(raw)
        hidden = cfg.hidden_size
        self.fc = nn.Linear(len(cfg.target_layer_ids) * hidden, hidden, bias=False)
        self.hidden_norm = RMSNorm(hidden, cfg.rms_norm_eps)
        self.layers = nn.ModuleList([Layer(cfg) for _ in cfg.layer_types])
        self.norm = RMSNorm(hidden, cfg.rms_norm_eps)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)

    def context(self, captured: torch.Tensor) -> torch.Tensor:
        """captured: concat of target layer outputs (B, T, n*H) -> ctx (B, T, H)."""
        return self.hidden_norm(self.fc(captured))

    def forward(self, block_embeds: torch.Tensor, block_pos: torch.Tensor, ctx: torch.Tensor,
                ctx_pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """block_embeds (B, R, H) at block_pos (R,); ctx (B, C, H) at ctx_pos (C,);
        mask (1 or B, 1, R, C + R) bool, True = may attend. Returns normed states (B, R, H)."""
        theta, head_dim, dtype = self.cfg.rope.theta, self.cfg.head_dim, block_embeds.dtype
        rope_q = rope_cos_sin(block_pos, head_dim, theta, dtype)
        rope_kv = rope_cos_sin(torch.cat([ctx_pos, block_pos]), head_dim, theta, dtype)
        x = block_embeds
        for layer in self.layers:
            x = layer(x, ctx, rope_q, rope_kv, mask)
        return self.norm(x)


def block_mask(anchors: torch.Tensor, ctx_len: int, block_size: int, window: int | None) -> torch.Tensor:
    """Bool (A*bs, ctx_len + A*bs): block a sees ctx rows [max(0, P_a - window), P_a) and its own rows."""
    device = anchors.device
    n_anchor = anchors.shape[0]
    rows = n_anchor * block_size
    block_of_row = torch.arange(rows, device=device) // block_size
    anchor_of_row = anchors[block_of_row]
    ctx_idx = torch.arange(ctx_len, device=device)
    sees_ctx = ctx_idx[None, :] < anchor_of_row[:, None]
    if window is not None:
        sees_ctx &= ctx_idx[None, :] >= (anchor_of_row[:, None] - window)
    sees_block = block_of_row[:, None] == block_of_row[None, :]
    return torch.cat([sees_ctx, sees_block], dim=1)
