"""How a model's weights start: the init schemes of a block's linear layers (GPT-2's, Xavier's,
PyTorch's, with DeepNorm's beta), and Admin's data-dependent omega from a profiling pass.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from .variants import Shortcut

if TYPE_CHECKING:  # the model and the loop import this module to initialise with it
    from .data import Corpus
    from .model import Block, TransformerLM
    from .training import TrainConfig

__all__ = ["init_block_", "admin_init", "data_init_"]


def init_block_(block: Block, scheme: str, *, n_layers: int = 1) -> None:
    """Initialise a block's linear layers in place; norms keep gamma = 1, beta = 0.

    - ``"gpt2"`` (the training default): N(0, 0.02^2) weights, zero biases, and the two branch
      output projections (W_o, fc2) scaled by 1/sqrt(2 n_layers), as GPT-2 and nanoGPT do. It keeps
      the residual stream's growth at init small, which is what makes deep pre-LN stacks train.
    - ``"xavier"``: Xavier-normal weights and zero biases, as Xiong et al. (2002.04745) assume.
    - ``"torch"``: PyTorch's default `nn.Linear` init (for parity tests and curiosity).

    DeepNorm's beta follows one rule in every scheme: it multiplies the init of W_v, W_o, fc1 and
    fc2 and leaves W_q, W_k alone (Wang et al. 2022). Under ``"xavier"`` that is the paper's
    Xavier-normal with gain beta; under ``"torch"`` it is torchscale's: the default init, weights
    and biases, times beta; under ``"gpt2"`` the std is 0.02 * beta, and beta takes the place of
    GPT-2's 1/sqrt(2 n_layers) on W_o and fc2 (both shrink the branches; applying both would
    shrink them twice). That last one is neither the paper's init nor torchscale's: it is GPT-2's
    scheme with DeepNorm's branch shrinkage, kept so that every variant trains under the same
    default. DeepNet's bound on the model update is derived for the Xavier init, so reproducing the
    paper means ``init="xavier"`` (chapter 5 does, and measures what the choice changes). For any
    placement without alpha, beta is 1 and the schemes are as listed.
    """
    a, m, beta = block.attn, block.mlp, block.beta
    deepnorm = block.placement.uses_alpha
    residual = 1.0 if deepnorm else 1.0 / math.sqrt(2 * n_layers)
    d = a.o.in_features
    # (weight, bias, gain, is a branch output): W_q, W_k, W_v are slices of the fused weight, each
    # initialised as the d x d matrix it is, so beta reaches W_v and only W_v (the slice xformers
    # once missed, their issue #219) and Xavier's fans are d and d, not d and 3d.
    w, b = a.qkv.weight, a.qkv.bias
    layers = [(w[i * d : (i + 1) * d], None if b is None else b[i * d : (i + 1) * d], gain, False)
              for i, gain in enumerate((1.0, 1.0, beta))]  # fmt: skip
    layers += [(a.o.weight, a.o.bias, beta, True), (m.fc1.weight, m.fc1.bias, beta, False)]
    layers += [(m.fc2.weight, m.fc2.bias, beta, True)]
    with torch.no_grad():
        for weight, bias, gain, branch_output in layers:
            if scheme == "torch":
                weight.mul_(gain)
                if bias is not None:
                    bias.mul_(gain)
                continue
            if scheme == "xavier":
                nn.init.xavier_normal_(weight, gain=gain)
            else:
                nn.init.normal_(weight, std=0.02 * gain * (residual if branch_output else 1.0))
            if bias is not None:
                nn.init.zeros_(bias)


@torch.no_grad()
def admin_init(model: TransformerLM, idx: torch.Tensor) -> list[float]:
    """Admin's profiling pass (Liu et al. 2020, 2004.08249): one forward pass on ``idx`` sets every
    sub-layer's omega; returns the omegas, input side first (attention, then FFN, per block).

    The authors' recurrence (Transformer-Clinic, fairseq ``transformer_layer.py``): the first omega
    is 1, each next one sqrt(Var[omega * x] + Var[f(x)]) of the sub-layer before it, for x its
    input and f(x) its branch output, variances over all entries, every channel of omega the same
    number (training then moves them apart). After a post-LN norm Var[x] is about 1, so
    omega_i^2 = Var[x_0] + sum_{j<i} Var[f_j(x_{j-1})]: the paper's formula, with the embeddings
    counted as the first term. The first omega of 1 matches their unit-variance embeddings (as
    ``init="xavier"``'s); the others follow the measured scale, and inside a norm only the ratio
    of omega * x to f(x) counts (under GPT-2's init they come out near 0.03, weighed against branch
    outputs as small). Runs in eval mode (no dropout), whatever mode the model is in, and leaves
    every module's mode as it was.
    """
    if not all(w.shortcut is Shortcut.OMEGA for block in model.blocks for w in block.placement.wraps):
        raise ValueError(
            "admin_init needs Admin's omega on every sub-layer's shortcut (Shortcut.OMEGA, as in "
            "VARIANTS['admin']); this model's blocks do not have it"
        )
    omegas: list[float] = []
    shortcut_var: list[float] = []  # Var[omega * x], one per sub-layer run so far
    branch_var: list[float] = []  # Var[f(x)]

    def set_omega(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        # Called as a sub-layer starts: the one before it has recorded both of its variances.
        k = len(omegas)
        value = 1.0 if k == 0 else math.sqrt(shortcut_var[k - 1] + branch_var[k - 1])
        module.weight.fill_(value)
        omegas.append(value)

    def record(into: list[float]) -> Callable[[nn.Module, tuple[torch.Tensor, ...], torch.Tensor], None]:
        return lambda module, args, out: into.append(float(out.double().var(unbiased=False)))

    hooks = []
    for block in model.blocks:
        for shortcut in (block.attn_shortcut, block.ffn_shortcut):
            omega = shortcut[1]  # Admin's omega: position 1 of the shortcut's Sequential
            hooks.append(omega.register_forward_pre_hook(set_omega))
            hooks.append(omega.register_forward_hook(record(shortcut_var)))
        hooks.append(block.branch.register_forward_hook(record(branch_var)))  # once per sub-layer
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        model.hidden(idx)
    finally:
        for h in hooks:
            h.remove()
        for m, was in modes:
            m.training = was
    return omegas


def data_init_(model: TransformerLM, corpus: Corpus, config: TrainConfig) -> None:
    """The part of a model's init that needs data, done in place: Admin's profiling pass
    (`admin_init`) when its blocks have Admin's omega; no other placement has such a part.

    It reads the run's first training batch from a generator of its own, seeded as the run's, so
    the batches the run trains on stay the same."""
    if any(block.placement.uses_omega for block in model.blocks):
        first = torch.Generator().manual_seed(config.seed)
        x, _ = corpus.batch("train", config.batch_size, config.seq_len, first)
        admin_init(model, x)
