"""An ensemble of small transformer encoders evaluated as one model with a leading member axis.

Every weight has shape [members, ...], so all members run in the same batched matmuls (one
`baddbmm` per linear layer); members share nothing, so each one learns independently.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

LOGVAR_MIN, LOGVAR_MAX = -9.0, 0.0  # pos lives in [0, 1]: its std is below 1
CHUNK_TOKENS = 16  # longest chunk of tokens averaged into one position


class EnsembleLinear(nn.Module):
    def __init__(self, members: int, d_in: int, d_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(members, d_in, d_out) / math.sqrt(d_in))
        self.bias = nn.Parameter(torch.zeros(members, 1, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [M, N, d_in] -> [M, N, d_out]
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    def __init__(self, members: int, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, 1, d))
        self.bias = nn.Parameter(torch.zeros(members, 1, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:]) * self.weight + self.bias


class EnsembleBlock(nn.Module):
    """Pre-norm transformer encoder layer, per member."""

    def __init__(self, members: int, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = EnsembleLayerNorm(members, d), EnsembleLayerNorm(members, d)
        self.qkv = EnsembleLinear(members, d, 3 * d)
        self.out = EnsembleLinear(members, d, d)
        self.ff1, self.ff2 = EnsembleLinear(members, d, 2 * d), EnsembleLinear(members, 2 * d, d)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
        m, b, t = shape  # x is [M, B*T, d]; attn_mask [M*B, 1, 1, T] bool (True = attend)
        d = x.shape[-1]
        q, k, v = self.qkv(self.ln1(x)).view(m * b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # [M*B, H, T, dh]
        x = x + self.out(a.transpose(1, 2).reshape(m, b * t, d))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class EnsembleEncoder(nn.Module):
    """Tokens -> per member: status logits [M, B, S], pos mean [M, B] in (0, 1), pos log-variance [M, B]."""

    def __init__(self, members: int, vocab_size: int, d_model: int, layers: int, heads: int,
                 max_tokens: int, n_status: int):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"world_model.d_model={d_model} must be divisible by world_model.heads={heads}")
        self.members = members
        self.tok = nn.Parameter(torch.randn(members, vocab_size, d_model) * 0.02)
        self.pos = nn.Parameter(torch.randn(members, max_tokens, d_model) * 0.02)
        self.inner = nn.Parameter(torch.randn(members, CHUNK_TOKENS, d_model) * 0.02)  # order inside a chunk
        self.blocks = nn.ModuleList(EnsembleBlock(members, d_model, heads) for _ in range(layers))
        self.ln = EnsembleLayerNorm(members, d_model)
        self.status_head = EnsembleLinear(members, d_model, n_status)
        self.quality_head = EnsembleLinear(members, d_model, 2)

    def forward(self, ids: torch.Tensor, slots: torch.Tensor, inner: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """ids, slots, inner: [B, R] (same input for every member) or [M, B, R] (a batch per member).

        Token r, tagged with its place inner[r] in its chunk, is averaged into sequence position
        slots[r] (-1 = padding): a chunk (e.g. `n_estimators=200,`) is one transformer position,
        which keeps sequences ~4x shorter than one position per token.
        """
        m = self.members
        if ids.dim() == 2:
            ids, slots, inner = (z.expand(m, *z.shape) for z in (ids, slots, inner))
        _, b, _ = ids.shape
        t = int(slots.max()) + 1
        dump = torch.where(slots < 0, t, slots)  # padding goes to an extra position, then dropped
        member = torch.arange(m)[:, None, None]
        emb = self.tok[member, ids] + self.inner[member, inner]  # [M, B, R, d]
        d = emb.shape[-1]
        x = emb.new_zeros(m, b, t + 1, d).scatter_add_(2, dump.unsqueeze(-1).expand_as(emb), emb)
        count = emb.new_zeros(m, b, t + 1).scatter_add_(2, dump, torch.ones_like(dump, dtype=emb.dtype))
        count = count[..., :t]
        mask = count > 0
        x = x[:, :, :t] / count.clamp_min(1.0).unsqueeze(-1) + self.pos[:, None, :t]
        x = x.reshape(m, b * t, d)
        attn_mask = torch.zeros(m * b, 1, 1, t, dtype=x.dtype).masked_fill(~mask.reshape(m * b, 1, 1, t), -1e9)
        for block in self.blocks:
            x = block(x, attn_mask, (m, b, t))
        x = self.ln(x).view(m, b, t, d)
        w = mask.to(x.dtype).unsqueeze(-1)
        pooled = ((x * w).sum(2) / w.sum(2).clamp_min(1.0)).reshape(m, b, d)
        logits = self.status_head(pooled)
        q = self.quality_head(pooled)
        pos_mean = torch.sigmoid(q[..., 0])
        pos_logvar = LOGVAR_MIN + (LOGVAR_MAX - LOGVAR_MIN) * torch.sigmoid(q[..., 1])  # soft bounds keep gradients
        return logits, pos_mean, pos_logvar
