"""The norms and scales a block is built from: RMSNorm (Gemma's 1 + w form too), DyT, fixed and
learned scales, L2 normalisation, NormFormer's head scale, and `make_norm`, which picks by kind.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["NORM_KINDS", "RMS_NORMS", "RMSNorm", "DyT", "Scale", "LearnedScale", "L2Norm", "HeadScale", "make_norm"]

# "gemma_rms" is RMSNorm with gain (1 + weight), weight initialised to 0, as Gemma computes it.
# "dyt" is no norm at all but DyT, gamma * tanh(alpha * x) + beta, in every norm's place (2503.10622).
NORM_KINDS = ("layer", "rms", "gemma_rms", "dyt")


class RMSNorm(nn.Module):
    """x / rms(x) * gamma (Zhang & Sennrich 2019, 1910.07467); here so torch 2.2 works too.

    ``unit_offset=True`` is Gemma's parametrisation: gamma = 1 + weight, with weight initialised to
    0 (the same function at init; weight decay then pulls the gain toward 1, not 0). Gemma's
    checkpoints store that w; loaded into an ordinary RMSNorm they give the gain w instead of 1 + w.
    The porting bug that doubles every gain is another: an implementation that multiplies by
    1 + weight but fills the weight with 1 at init (as Hugging Face's ``_init_weights`` once did)
    starts at gamma = 2. Gemma computes the norm in float32 with eps = 1e-6; this one computes in
    the input's dtype with the ``eps`` it is given.
    """

    def __init__(self, d: int, eps: float = 1e-5, *, unit_offset: bool = False) -> None:
        super().__init__()
        self.eps, self.offset = eps, 1.0 if unit_offset else 0.0
        self.weight = nn.Parameter(torch.zeros(d) if unit_offset else torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (self.offset + self.weight)


class Scale(nn.Module):
    """Multiplies by a fixed constant (DeepNorm's alpha); a buffer, so it follows the model's device."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.register_buffer("value", torch.tensor(float(value)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.value * x

    def extra_repr(self) -> str:
        return f"{float(self.value):.4g}"


class DyT(nn.Module):
    """Dynamic Tanh (Zhu et al. 2025, 2503.10622): gamma * tanh(alpha * x) + beta, in a norm's place.

    alpha is one learned scalar, initialised at ``alpha_init`` (the paper's default 0.5); gamma = 1
    and beta = 0 per channel, as a LayerNorm's affine. It computes no statistic: tanh squashes the
    rare large entries that a norm would divide down, and is nearly linear on the rest.
    """

    def __init__(self, d: int, alpha_init: float = 0.5, *, bias: bool = True) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(d))
        if bias:
            self.bias = nn.Parameter(torch.zeros(d))
        else:  # a model without biases gets none here either; a constant 0 keeps forward free of branches
            self.register_buffer("bias", torch.zeros(d), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.alpha * x) * self.weight + self.bias


# torch >= 2.4 has its own RMSNorm (one fused kernel where it has one); it gives the same numbers as
# `RMSNorm` here, forward and backward (tested), so "rms" uses it there and this one elsewhere.
TORCH_RMS_NORM: Optional[type[nn.Module]] = getattr(nn, "RMSNorm", None)
RMS_NORMS: tuple[type[nn.Module], ...] = (RMSNorm,) if TORCH_RMS_NORM is None else (RMSNorm, TORCH_RMS_NORM)


def make_norm(kind: str, d: int, eps: float, bias: bool) -> nn.Module:
    """The norm of a kind in `NORM_KINDS`, over width ``d`` (RMSNorm and DyT's gamma and beta follow
    ``bias`` as LayerNorm's do; RMSNorm has no bias)."""
    if kind == "layer":
        return nn.LayerNorm(d, eps=eps, bias=bias)
    if kind == "dyt":  # no statistic, so no eps
        return DyT(d, bias=bias)
    if kind == "rms" and TORCH_RMS_NORM is not None:
        return TORCH_RMS_NORM(d, eps=eps)
    return RMSNorm(d, eps=eps, unit_offset=kind == "gemma_rms")


class HeadScale(nn.Module):
    """NormFormer's per-head gain, initialised to 1. The paper scales each head's output BEFORE
    W_o (input [B, H, T, d_head]); fairseq's ``--scale-heads`` scales the H chunks of W_o's OUTPUT
    (``after_o=True``, input [B, T, d]): each is a reparametrisation of W_o, not the same one."""

    def __init__(self, n_heads: int, *, after_o: bool = False) -> None:
        super().__init__()
        self.after_o = after_o
        self.weight = nn.Parameter(torch.ones(n_heads))

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        if self.after_o:  # [B, T, d] seen as [B, T, H, d/H]
            return (y.unflatten(-1, (self.weight.numel(), -1)) * self.weight[:, None]).flatten(-2)
        return y * self.weight.view(1, -1, 1, 1)


class L2Norm(nn.Module):
    """Scales each vector to unit length (Henry et al.'s QK-norm, before the learned scale)."""

    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=-1, eps=self.eps)


class LearnedScale(nn.Module):
    """A learned scale: one number (``shape=()``), or one per channel, initialised to ``init``."""

    def __init__(self, shape: Union[int, tuple[int, ...]] = (), init: float = 1.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full(shape if isinstance(shape, tuple) else (shape,), float(init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight
