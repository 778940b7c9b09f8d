"""Closed-form Jacobians of LayerNorm and RMSNorm, batched over leading dimensions.

The theory chapters compare these with autograd and read off their null spaces.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["layernorm_jacobian", "rmsnorm_jacobian"]


def layernorm_jacobian(x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: float = 1e-5) -> torch.Tensor:
    """d LN(x) / dx = diag(gamma) (1/sigma) (I - 1 1^T/d - z z^T/d), shape [..., d, d].

    mu is the mean, sigma = sqrt(var + eps) with the biased variance, z = (x - mu) / sigma.
    At eps = 0 the null space is span{1, z}: LN ignores shifts and rescalings of its input.
    """
    d = x.shape[-1]
    mu = x.mean(-1, keepdim=True)
    sigma = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    z = (x - mu) / sigma
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    centre = eye - 1.0 / d - z.unsqueeze(-1) * z.unsqueeze(-2) / d
    j = centre / sigma.unsqueeze(-1)
    return j if weight is None else weight.unsqueeze(-1) * j


def rmsnorm_jacobian(x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: float = 1e-5) -> torch.Tensor:
    """d RMSNorm(x) / dx = diag(gamma) / rms (I - xhat xhat^T / d), shape [..., d, d].

    rms = sqrt(mean(x^2) + eps), xhat = x / rms. At eps = 0 the null space is span{x}.
    """
    d = x.shape[-1]
    rms = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    xhat = x / rms
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    j = (eye - xhat.unsqueeze(-1) * xhat.unsqueeze(-2) / d) / rms.unsqueeze(-1)
    return j if weight is None else weight.unsqueeze(-1) * j
