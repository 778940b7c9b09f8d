"""Measurements on a model at a moment: gradients per layer (and the factors of NormFormer's statistic),
residual-stream norms, attention-logit statistics, norm-input scales, and how far a model has moved.

Every probe runs in a stated mode (``train=False``, eval mode, by default: no dropout mask is
sampled, so a measurement is a function of the weights) and leaves the model's modes as it found them.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .attention import Attention
from .model import TransformerLM
from .norms import RMS_NORMS

__all__ = [
    "mode",
    "block_param_names",
    "layer_grad_stats",
    "grad_norms",
    "residual_stream",
    "residual_norms",
    "residual_norms_probe",
    "position_similarity",
    "max_activations",
    "stack_jacobian",
    "norm_input_scale",
    "record_attention_logits",
    "attention_stats",
    "model_update",
    "ffn_gradient_factors",
]

GRAD_STATS = ("l2", "l1_mean")


@contextlib.contextmanager
def mode(module: nn.Module, train: bool) -> Iterator[nn.Module]:
    """Put ``module`` in train or eval mode for the block, then restore every submodule's own mode."""
    before = [(m, m.training) for m in module.modules()]
    module.train(train)
    try:
        yield module
    finally:
        for m, was in before:
            m.training = was


def block_param_names(model: nn.Module) -> list[str]:
    """The parameter names every block of ``model`` has, in the first block's order: a stack whose
    blocks differ (Mix-LN) has each norm in some blocks only, and a per-layer curve needs all."""
    shared = set.intersection(*({n for n, _ in b.named_parameters()} for b in model.blocks))
    return [n for n, _ in model.blocks[0].named_parameters() if n in shared]


def _block_param(model: TransformerLM, param: str) -> list[torch.nn.Parameter]:
    names = block_param_names(model)
    if param not in names:
        raise ValueError(f"unknown block parameter {param!r}; valid choices: {', '.join(names)}")
    return [dict(b.named_parameters())[param] for b in model.blocks]


def layer_grad_stats(model: TransformerLM, param: str = "mlp.fc2.weight") -> dict[str, list[float]]:
    """From the gradients now stored in ``model``: per block, input side first, for parameter
    ``param``: ``l2`` = ||dL/dW||_F and ``l1_mean`` = mean |dL/dW_ij| (NormFormer's Fig. 2 measure);
    and ``block_l2``, the L2 norm over all of the block's parameters. A missing gradient counts as 0.

    The training loop logs exactly this, before clipping; `grad_norms` computes it on a batch.
    """
    out: dict[str, list[float]] = {"l2": [], "l1_mean": [], "block_l2": []}
    for block, p in zip(model.blocks, _block_param(model, param)):
        g = p.grad
        out["l2"].append(0.0 if g is None else float(g.norm()))
        out["l1_mean"].append(0.0 if g is None else float(g.abs().mean()))
        sq = sum(float(q.grad.pow(2).sum()) for q in block.parameters() if q.grad is not None)
        out["block_l2"].append(math.sqrt(sq))
    return out


def grad_norms(
    model: TransformerLM,
    x: torch.Tensor,
    y: torch.Tensor,
    param: str = "mlp.fc2.weight",
    *,
    stat: str = "l2",
    train: bool = False,
) -> torch.Tensor:
    """The gradient of the loss on (x, y) for ``param`` of every block, input side first: shape [L].

    ``stat`` is one of ``"l2"`` (Frobenius norm) or ``"l1_mean"`` (mean absolute entry); the default
    parameter is the FFN's second matrix, W^2 in Xiong et al. (2002.04745), whose last-layer gradient
    their Theorem 1 bounds. Eval mode unless ``train=True``. The model's gradients are cleared after.
    """
    if stat not in GRAD_STATS:
        raise ValueError(f"unknown gradient statistic {stat!r}; valid choices: {', '.join(GRAD_STATS)}")
    _block_param(model, param)  # validates the name before any work
    with mode(model, train):
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
        out = torch.tensor(layer_grad_stats(model, param)[stat])
        model.zero_grad(set_to_none=True)
    return out


@torch.no_grad()
def residual_stream(model: TransformerLM, idx: torch.Tensor, *, train: bool = False) -> list[torch.Tensor]:
    """The residual stream x_0 (the embeddings) .. x_L (the last block's output, before any final
    norm), each [B, T, d]: the trunk that post-LN normalises and pre-LN leaves alone. Eval mode
    unless ``train=True``."""
    seen: list[torch.Tensor] = []
    hooks = [model.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))]
    hooks += [b.register_forward_hook(lambda m, args, out: seen.append(out)) for b in model.blocks]
    try:
        with mode(model, train):
            model(idx)
    finally:
        for h in hooks:
            h.remove()
    return seen


def residual_norms(model: TransformerLM, idx: torch.Tensor, *, train: bool = False) -> torch.Tensor:
    """E||x_l||^2 / d for l = 0 .. L, averaged over batch and positions: shape [L + 1]. Eval mode
    unless ``train=True``."""
    return torch.stack([x.pow(2).mean() for x in residual_stream(model, idx, train=train)])


def residual_norms_probe(model: TransformerLM, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """`residual_norms` as a probe for `run` and `run_many` (``probe=`` or ``final_probe=``):
    ``{"residual_norms": [L + 1]}``; a run stores the tensor as a list of floats."""
    return {"residual_norms": residual_norms(model, x)}


def position_similarity(h: torch.Tensor) -> float:
    """How alike the positions of each sequence in h [B, T, d] are: the mean cosine similarity
    between its T states (each with its channel mean removed), over the T(T - 1) ordered pairs and
    the batch. 1 when every position holds the same vector (rank collapse), near 0 for random ones."""
    z = torch.nn.functional.normalize(h - h.mean(-1, keepdim=True), dim=-1)
    t = z.shape[1]
    return float(((z @ z.transpose(1, 2)).sum((1, 2)) - t).mean() / (t * (t - 1)))


@torch.no_grad()
def max_activations(model: TransformerLM, idx: torch.Tensor, *, train: bool = False) -> dict[str, torch.Tensor]:
    """The largest activation of each residual-stream state x_0 .. x_L (shapes [L + 1]): ``max`` (the
    largest |x| over batch, positions and channels), ``median`` (the median |x|, the typical size),
    ``ratio`` (max / median: Sun et al.'s "massive activations", 2402.17762, are about 1e4-1e5x), and where
    the largest sits: ``position`` (token index) and ``channel``. Eval mode unless ``train=True``."""
    out: dict[str, list] = {"max": [], "median": [], "position": [], "channel": []}
    for x in residual_stream(model, idx, train=train):
        a = x.abs()
        flat = int(a.argmax())
        _, t, d = a.shape
        out["max"].append(a.flatten()[flat])
        out["median"].append(a.median())
        out["position"].append(torch.tensor((flat // d) % t))
        out["channel"].append(torch.tensor(flat % d))
    stats = {k: torch.stack(v) for k, v in out.items()}
    stats["ratio"] = stats["max"] / stats["median"]
    return stats


def stack_jacobian(blocks: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """d x_L / d x_0 through ``blocks`` (in eval mode) for one sequence x: [T, d] -> a [T*d, T*d] matrix."""

    def trunk(x0: torch.Tensor) -> torch.Tensor:
        h = x0[None]
        for block in blocks:
            h = block(h)
        return h[0]

    with contextlib.ExitStack() as stack, warnings.catch_warnings():
        for block in blocks:
            stack.enter_context(mode(block, False))
        # functorch falls back to a loop for SDPA's backward on the CPU and says so; it is only slower.
        warnings.filterwarnings("ignore", message=".*performance drop.*")
        j = torch.func.jacrev(trunk)(x)
    n = x.numel()
    return j.reshape(n, n).detach()


def _norm_scale(module: nn.Module, x: torch.Tensor) -> float:
    """What the norm divides by, averaged over tokens: sigma = sqrt(var + eps) for LayerNorm (its
    Jacobian scales as gamma / sigma) and rms = sqrt(mean x^2 + eps) for RMSNorm."""
    if isinstance(module, RMS_NORMS):
        return float((x.pow(2).mean(-1) + module.eps).sqrt().mean())
    return float((x.var(-1, unbiased=False) + module.eps).sqrt().mean())


@torch.no_grad()
def norm_input_scale(model: TransformerLM, idx: torch.Tensor, *, train: bool = False) -> dict[str, float]:
    """For every LayerNorm/RMSNorm of the blocks, in the order the forward pass calls them: the scale
    it divides its input by (sigma for LayerNorm, rms for RMSNorm), averaged over tokens. Keys are
    module names (``blocks.0.attn_trunk``, ``blocks.0.attn.q_norm``, ...). Eval mode unless
    ``train=True``.

    For post-LN these are the trunk sums x + F(x): when they grow, the norm's Jacobian shrinks and
    the gradient through it vanishes (DeepNet 2203.00555, Fig. 4).
    """
    kinds = (nn.LayerNorm, *RMS_NORMS)
    names = {m: f"blocks.{name}" for name, m in model.blocks.named_modules() if isinstance(m, kinds)}
    seen: dict[str, float] = {}  # dicts keep insertion order: the order of the calls

    def record(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:  # returning None keeps the input
        seen.setdefault(names[module], _norm_scale(module, args[0]))

    hooks = [m.register_forward_pre_hook(record) for m in names]
    try:
        with mode(model, train):
            model(idx)
    finally:
        for h in hooks:
            h.remove()
    return seen


def record_attention_logits(model: nn.Module, on: bool) -> list[Attention]:
    """Switch every attention module's explicit, recording path on or off; returns the modules."""
    attns = [m for m in model.modules() if isinstance(m, Attention)]
    for a in attns:
        a.record_logits = on
    return attns


@torch.no_grad()
def attention_stats(model: TransformerLM, idx: torch.Tensor, *, train: bool = False) -> dict[str, torch.Tensor]:
    """Per layer, input side first, shapes [L]: ``max_logit``, the largest |q.k / sqrt(d_head)| over
    the positions a query may attend, and ``entropy``, the attention entropy of each query divided
    by ln(number of positions it attends) and averaged (1 = uniform, 0 = one-hot; independent of the
    sequence length). Its own forward pass, eval mode unless ``train=True``; it never raises on a
    blown-up model: non-finite logits give non-finite statistics."""
    attns = record_attention_logits(model, True)
    try:
        with mode(model, train):
            model(idx.to(model.tok.weight.device))
    finally:
        record_attention_logits(model, False)
    return {
        "max_logit": torch.stack([a.logit_stats["max_logit"] for a in attns]),
        "entropy": torch.stack([a.logit_stats["entropy"] for a in attns]),
    }


@torch.no_grad()
def model_update(model: TransformerLM, model0: TransformerLM, idx: torch.Tensor) -> float:
    """||F(x; theta_t) - F(x; theta_0)|| / ||F(x; theta_0)|| on the final hidden state (DeepNet Fig. 4),
    both models in eval mode: with equal weights it is exactly 0, whatever the dropout rate."""
    with mode(model, False), mode(model0, False):
        h, h0 = model.hidden(idx), model0.hidden(idx)
    return float((h - h0).norm() / h0.norm())


def ffn_gradient_factors(model: TransformerLM, x: torch.Tensor, y: torch.Tensor) -> dict[str, list[float]]:
    """Per block, input side first, what NormFormer's statistic mean |dL/dW_2| is made of and what
    arrives at the block, from its own forward and backward on (x, y) in eval mode (the model's
    ``.grad`` untouched). dL/dW_2 = sum_t delta_t h_t^T, so the statistic scales with both factors:

    ``h_rms`` (W_2's input h) and ``delta_rms`` (the gradient at W_2's output, which is the
    gradient at the block's output: the FFN branch adds to the stream); ``grad_w1`` and ``grad_w2``
    (mean |dL/dW| of the FFN's two matrices); ``grad_block`` (L2 over all the block's parameters);
    ``grad_stream`` (rms of dL/dx_l at the block's input). And, from the second call on, how far
    the weights moved since the previous call relative to their size: ``update_w2``, ``update_block``
    (the previous weights ride on the model as a plain attribute, so each run keeps its own).
    A probe for `run` and `run_many` (``probe=``)."""
    blocks = list(model.blocks)
    seen: dict[str, list[torch.Tensor]] = {"x": [], "h": [], "out": []}
    hooks = [b.register_forward_pre_hook(lambda m, args: seen["x"].append(args[0])) for b in blocks]

    def at_w2(module: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        seen["h"].append(args[0])  # returning None keeps the output
        seen["out"].append(out)

    hooks += [b.mlp.fc2.register_forward_hook(at_w2) for b in blocks]
    params = [list(b.parameters()) for b in blocks]
    try:
        with mode(model, False), torch.enable_grad():
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            flat = [p for ps in params for p in ps]
            grads = torch.autograd.grad(loss, seen["x"] + seen["out"] + flat, allow_unused=True)
    finally:
        for h in hooks:
            h.remove()
    n = len(blocks)
    g_x, g_out, g_params = grads[:n], grads[n : 2 * n], grads[2 * n :]
    by_param = {id(p): g for p, g in zip(flat, g_params)}

    def rms(t: torch.Tensor) -> float:
        return float(t.detach().pow(2).mean().sqrt())

    def l1_mean(p: torch.Tensor) -> float:
        g = by_param[id(p)]
        return 0.0 if g is None else float(g.abs().mean())

    out: dict[str, list[float]] = {
        "h_rms": [rms(h) for h in seen["h"]],
        "delta_rms": [rms(g) for g in g_out],
        "grad_w1": [l1_mean(b.mlp.fc1.weight) for b in blocks],
        "grad_w2": [l1_mean(b.mlp.fc2.weight) for b in blocks],
        "grad_block": [
            math.sqrt(sum(float(by_param[id(p)].pow(2).sum()) for p in ps if by_param[id(p)] is not None))
            for ps in params
        ],  # fmt: skip
        "grad_stream": [rms(g) for g in g_x],
    }
    now = [[p.detach().clone() for p in ps] for ps in params]
    prev = getattr(model, "_normlab_factors_prev", None)
    if prev is not None:

        def moved(new: list[torch.Tensor], old: list[torch.Tensor]) -> float:
            num = sum(float((a - b).pow(2).sum()) for a, b in zip(new, old))
            return math.sqrt(num / max(sum(float(b.pow(2).sum()) for b in old), 1e-30))

        w2 = [[i for i, p in enumerate(ps) if p is b.mlp.fc2.weight][0] for ps, b in zip(params, blocks)]
        out["update_w2"] = [moved([a[i]], [b[i]]) for a, b, i in zip(now, prev, w2)]
        out["update_block"] = [moved(a, b) for a, b in zip(now, prev)]
    model._normlab_factors_prev = now  # a plain attribute: not a parameter, buffer or state_dict entry
    return out
