"""Multi-head causal self-attention with the norm slots inside it: QK-norm in its three kinds and
NormFormer's per-head scale, each an `nn.Identity()` when unused; logit statistics for the probes.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from .norms import HeadScale, L2Norm, LearnedScale, make_norm

__all__ = ["QK_NORMS", "qk_norm_kind", "Attention"]

# What QK-norm normalises: "head" each head's q and k over d_head (Qwen3, Gemma 3; ViT-22B with
# LayerNorm), "full" the whole projection before the head split (OLMo 2), "l2" each head's q and k
# to unit length with a learned scale g in place of 1/sqrt(d_head) (Henry et al. 2020). True = "head".
QK_NORMS = ("head", "full", "l2")


def qk_norm_kind(qk_norm: Union[bool, str, None]) -> Optional[str]:
    """The QK-norm kind a ``qk_norm`` argument names: None (off), or one of `QK_NORMS` (True is "head")."""
    if qk_norm is None or qk_norm is False:
        return None
    if qk_norm is True:
        return "head"
    if isinstance(qk_norm, str) and qk_norm in QK_NORMS:
        return qk_norm
    raise ValueError(f"qk_norm must be False, True or one of {', '.join(QK_NORMS)}; got {qk_norm!r}")


class Attention(nn.Module):
    """Multi-head self-attention through `F.scaled_dot_product_attention`.

    ``qk_norm`` (see `QK_NORMS`) normalises q and k per head over d_head ("head", as Qwen3 and
    Gemma 3), over the whole projection before the head split ("full", OLMo 2), or to unit length
    per head with a learned scale g replacing 1/sqrt(d_head) ("l2", Henry et al.; g starts at
    sqrt(d_head), so the logits start at ordinary attention's scale). ``head_scale`` is NormFormer's
    per-head scale, "before_o" or "after_o" (see `HeadScale`). ``attn_dropout`` drops attention
    probabilities (0 by default, as in fairseq); the dropout on the sub-layer's output lives in
    `Block`, after the branch's last norm. Setting ``record_logits = True`` takes an explicit path
    that stores per-layer logit statistics in ``logit_stats``; only the probes set it, on a
    forward pass of their own.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        qk_norm: Union[bool, str] = False,
        head_scale: Optional[str] = None,
        norm_kind: str = "layer",
        eps: float = 1e-5,
        bias: bool = True,
        attn_dropout: float = 0.0,
        causal: bool = True,
    ) -> None:
        super().__init__()
        self.n_heads, self.d_head, self.causal = n_heads, d_model // n_heads, causal
        kind = qk_norm_kind(qk_norm)
        self.attn_dropout = attn_dropout
        # W_q, W_k, W_v stacked in one weight [3d, d] (as PyTorch's in_proj_weight and nanoGPT's
        # c_attn): one matmul instead of three, and `w_q`, `w_k`, `w_v` name the slices.
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.o = nn.Linear(d_model, d_model, bias=bias)
        # QK-norm's slots: over the whole projection (q_proj_norm), per head (q_norm), the learned
        # scale of the "l2" kind (q_scale); the softmax temperature 1/sqrt(d_head) unless "l2".
        full, per_head = kind == "full", kind in ("head", "l2")

        def per_head_norm() -> nn.Module:
            return L2Norm() if kind == "l2" else make_norm(norm_kind, self.d_head, eps, bias)

        self.q_proj_norm = make_norm(norm_kind, d_model, eps, bias) if full else nn.Identity()
        self.k_proj_norm = make_norm(norm_kind, d_model, eps, bias) if full else nn.Identity()
        self.q_norm = per_head_norm() if per_head else nn.Identity()
        self.k_norm = per_head_norm() if per_head else nn.Identity()
        self.q_scale = LearnedScale((), math.sqrt(self.d_head)) if kind == "l2" else nn.Identity()
        self.scale = 1.0 if kind == "l2" else 1.0 / math.sqrt(self.d_head)
        self.head_scale = HeadScale(n_heads) if head_scale == "before_o" else nn.Identity()
        self.head_scale_out = HeadScale(n_heads, after_o=True) if head_scale == "after_o" else nn.Identity()
        self.record_logits = False
        self.logit_stats: dict[str, torch.Tensor] = {}

    @property
    def w_q(self) -> torch.Tensor:
        """W_q, a view of the first d rows of the fused weight (in-place edits reach the model)."""
        return self.qkv.weight[: self.n_heads * self.d_head]

    @property
    def w_k(self) -> torch.Tensor:
        d = self.n_heads * self.d_head
        return self.qkv.weight[d : 2 * d]

    @property
    def w_v(self) -> torch.Tensor:
        return self.qkv.weight[2 * self.n_heads * self.d_head :]

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = self.q_scale(self.q_norm(self._heads(self.q_proj_norm(q))))
        k, v = self.k_norm(self._heads(self.k_proj_norm(k))), self._heads(v)
        if self.record_logits:
            y = self._attend_and_record(q, k, v)
        else:
            p = self.attn_dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal, scale=self.scale)
        y = self.head_scale(y).transpose(1, 2).reshape(b, n, d)
        return self.head_scale_out(self.o(y))

    def _attend_and_record(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        n = q.shape[-2]
        logits = (q @ k.transpose(-2, -1)) * self.scale
        allowed = torch.ones(n, n, dtype=torch.bool, device=q.device)
        if self.causal:
            allowed = allowed.tril()
        attn = logits.masked_fill(~allowed, float("-inf")).softmax(-1)
        # Entropy of each query's attention over the positions it may attend, divided by its
        # maximum ln(count): 1 is uniform, 0 is one-hot, whatever the sequence length. Rows that
        # see a single position (the first, under a causal mask) have no choice and are left out.
        count = allowed.sum(-1)
        plogp = torch.where(allowed & (attn > 0), attn * attn.log(), torch.zeros_like(attn))
        rows = (count > 1).to(attn.dtype)  # a weight, not a boolean index: no data-dependent shape, no sync
        per_row = -plogp.sum(-1) / count.clamp(min=2).log()
        entropy = (per_row * rows).sum(-1) / rows.sum()
        self.logit_stats = {
            # NaN or inf logits give a NaN or inf statistic, never an error: the caller decides.
            "max_logit": logits.abs().masked_fill(~allowed, 0.0).amax().detach(),
            "entropy": entropy.mean().detach(),
        }
        attn = F.dropout(attn, self.attn_dropout, self.training)
        return attn @ v
