"""Qwen3.5 MTP head in PyTorch, with the parameter names of a real checkpoint's `mtp.*` tensors.

For head row t (0-based position of the target's hidden state H[t]):
  u_t   = fc(concat[pre_fc_norm_embedding(embed(x[t+1])), pre_fc_norm_hidden(H[t])])   # [embedding, hidden]
  h     = layers.0(u, causal attention over the head's own rows, RoPE position of row t = t + 1)
  logit = lm_head(norm(h))      -> predicts x[t+2]
H is the target's final hidden state after its final norm. embed/lm_head are the target's (shared).
Norms are transformers' zero-centred Qwen3.5 RMSNorm (computes x*(1+w)), so state_dict() is already
in HF layout.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from engines.checkpoint import MTP_PREFIX


def qwen35_classes():
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m

    return m.Qwen3_5DecoderLayer, m.Qwen3_5RMSNorm, m.Qwen3_5TextRotaryEmbedding


class MtpHead(nn.Module):
    def __init__(self, target_config) -> None:
        super().__init__()
        decoder_layer, rms_norm, rotary = qwen35_classes()
        config = copy.deepcopy(target_config)
        config.layer_types = ["full_attention"]
        config.num_hidden_layers = 1
        hidden = config.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        self.pre_fc_norm_embedding = rms_norm(hidden, eps=config.rms_norm_eps)
        self.pre_fc_norm_hidden = rms_norm(hidden, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList([decoder_layer(config, 0)])
        self.norm = rms_norm(hidden, eps=config.rms_norm_eps)
        self.rotary = rotary(config=config)
        nn.init.normal_(self.fc.weight, std=0.02)
        for module in self.layers.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, next_embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """next_embeds: embed(x[t+1]) (B, L, H); hidden: H[t] (B, L, H); positions: (L,) = t + 1.
        Returns the head's pre-lm_head states (B, L, H), already through `norm`."""
        u = self.fc(torch.cat([self.pre_fc_norm_embedding(next_embeds), self.pre_fc_norm_hidden(hidden)], dim=-1))
        batch, length, _ = u.shape
        position_ids = positions.view(1, -1).expand(batch, -1)
        # (3, B, L): the text-only form of Qwen3.5's multimodal RoPE ids (all three sections equal);
        # every transformers 5.x version accepts it, some reject (B, L).
        position_embeddings = self.rotary(u, position_ids[None].expand(3, -1, -1))
        causal = torch.ones(length, length, dtype=torch.bool, device=u.device).tril().view(1, 1, length, length)
        out = self.layers[0](u, position_embeddings=position_embeddings, attention_mask=causal,
                             position_ids=position_ids)
        if isinstance(out, tuple):
            out = out[0]
        return self.norm(out)

    def export_state(self) -> dict[str, torch.Tensor]:
        """`mtp.*` tensors (engines.checkpoint.MTP_PREFIX: where the engines look) with HF names; the
        rotary buffers are not parameters and are skipped."""
        return {MTP_PREFIX + k: v.detach() for k, v in self.state_dict().items() if not k.startswith("rotary.")}
