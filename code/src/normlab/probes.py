"""Measurements on a model at a moment: gradients per layer, residual-stream norms, attention-logit
statistics, and how far a trained model's output has moved from its initial one.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .model import Attention, RMSNorm, TransformerLM

__all__ = [
    "grad_norms",
    "residual_stream",
    "residual_norms",
    "stack_jacobian",
    "record_attention_logits",
    "attention_stats",
    "model_update",
]


def grad_norms(model: TransformerLM, x: torch.Tensor, y: torch.Tensor, param: str = "mlp.fc2.weight") -> torch.Tensor:
    """||dLoss/dW||_F for the parameter ``param`` of every block, input side first: shape [L].

    The default is the FFN's second matrix, W^2 in Xiong et al. (2002.04745), whose last-layer
    gradient their Theorem 1 bounds.
    """
    names = dict(model.blocks[0].named_parameters())
    if param not in names:
        raise ValueError(f"unknown block parameter {param!r}; valid choices: {', '.join(names)}")
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
    out = torch.stack([dict(b.named_parameters())[param].grad.norm() for b in model.blocks]).detach()
    model.zero_grad(set_to_none=True)
    return out


@torch.no_grad()
def residual_stream(model: TransformerLM, idx: torch.Tensor) -> list[torch.Tensor]:
    """The residual stream x_0 (the embeddings) .. x_L (the last block's output, before any final
    norm), each [B, T, d]: the trunk that post-LN normalises and pre-LN leaves alone."""
    seen: list[torch.Tensor] = []
    hooks = [model.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))]
    hooks += [b.register_forward_hook(lambda m, args, out: seen.append(out)) for b in model.blocks]
    try:
        model(idx)
    finally:
        for h in hooks:
            h.remove()
    return seen


def residual_norms(model: TransformerLM, idx: torch.Tensor) -> torch.Tensor:
    """E||x_l||^2 / d for l = 0 .. L, averaged over batch and positions: shape [L + 1]."""
    return torch.stack([x.pow(2).mean() for x in residual_stream(model, idx)])


def stack_jacobian(blocks: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """d x_L / d x_0 through ``blocks`` for one sequence x: [T, d] -> a [T*d, T*d] matrix."""

    def trunk(x0: torch.Tensor) -> torch.Tensor:
        h = x0[None]
        for block in blocks:
            h = block(h)
        return h[0]

    with warnings.catch_warnings():
        # functorch falls back to a loop for SDPA's backward on the CPU and says so; it is only slower.
        warnings.filterwarnings("ignore", message=".*performance drop.*")
        j = torch.func.jacrev(trunk)(x)
    n = x.numel()
    return j.reshape(n, n).detach()


@torch.no_grad()
def norm_input_rms(model: TransformerLM, idx: torch.Tensor) -> list[float]:
    """Root-mean-square of the input to every LayerNorm/RMSNorm of the blocks, in forward order.

    For post-LN these are the trunk sums x + F(x): when they grow, the norm's Jacobian (about
    gamma / rms) shrinks and the gradient through it vanishes (DeepNet 2203.00555, Fig. 4).
    """
    norms = [m for b in model.blocks for m in b.modules() if isinstance(m, (nn.LayerNorm, RMSNorm))]
    seen: dict[int, float] = {}

    def record(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:  # returning None keeps the input
        seen.setdefault(id(module), float(args[0].pow(2).mean().sqrt()))

    hooks = [m.register_forward_pre_hook(record) for m in norms]
    try:
        model(idx)
    finally:
        for h in hooks:
            h.remove()
    return [seen[id(m)] for m in norms]


def record_attention_logits(model: nn.Module, on: bool) -> list[Attention]:
    """Switch every attention module's explicit, recording path on or off; returns the modules."""
    attns = [m for m in model.modules() if isinstance(m, Attention)]
    for a in attns:
        a.record_logits = on
    return attns


@torch.no_grad()
def attention_stats(model: TransformerLM, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per layer: the largest |attention logit| and the mean attention entropy (nats): shapes [L]."""
    attns = record_attention_logits(model, True)
    try:
        model(idx)
    finally:
        record_attention_logits(model, False)
    return {
        "max_logit": torch.stack([a.logit_stats["max_logit"] for a in attns]),
        "entropy": torch.stack([a.logit_stats["entropy"] for a in attns]),
    }


@torch.no_grad()
def model_update(model: TransformerLM, model0: TransformerLM, idx: torch.Tensor) -> float:
    """||F(x; theta_t) - F(x; theta_0)|| / ||F(x; theta_0)|| on the final hidden state (DeepNet Fig. 4)."""
    h, h0 = model.hidden(idx), model0.hidden(idx)
    return float((h - h0).norm() / h0.norm())
