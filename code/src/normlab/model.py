"""The Transformer block whose norm placement is data, and the decoder-only LM built from it.

Every variant the book compares (post, pre, sandwich, reordered, DeepNorm, NormFormer, ReZero,
Admin, each with or without QK-norm) is the same `Block`; an unused slot is `nn.Identity()`. A
stack may give each block its own placement (Mix-LN, LayerNorm Scaling: `LAYERWISE`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Callable, NamedTuple, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "VARIANTS",
    "LAYERWISE",
    "NORM_KINDS",
    "QK_NORMS",
    "qk_norm_kind",
    "INIT_SCHEMES",
    "ACTIVATIONS",
    "Placement",
    "placement",
    "placements",
    "mix_ln",
    "layernorm_scaling",
    "DeepNormCoefficients",
    "deepnorm_coefficients",
    "RMSNorm",
    "DyT",
    "Scale",
    "LearnedScale",
    "L2Norm",
    "HeadScale",
    "Attention",
    "MLP",
    "Block",
    "TransformerLM",
    "admin_init",
]


# --------------------------------------------------------------------------------------------
# Where the norms go: one frozen dataclass, one row per variant.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Which slots of a block are filled. Two variants differ in the fields that differ.

    Per sub-layer F (attention, then FFN) the block computes
    ``x <- trunk_norm(shortcut(skip(x)) + branch(out_norm(F(in_scale(in_norm(x))))))``; a False
    (or None) field leaves its slot an identity. ``shortcut`` and ``branch`` multiply by DeepNorm's
    alpha when their field is set (the FFN's shortcut also by a learned per-channel scale with
    ``ffn_resid_scale``, each sub-layer's by Admin's omega with ``shortcut_omega``; the branch by
    ReZero's learned scalar with ``resweight``); ``skip`` is ``in_norm`` when ``shortcut_normed`` is
    set; ``in_scale`` multiplies by ``in_norm_scale``.
    """

    in_norm: bool = False  # pre-LN: the sub-layer reads LN(x)
    attn_out_norm: bool = False  # sandwich / reordered / NormFormer: LN on the attention output, before the add
    ffn_out_norm: bool = False  # sandwich / reordered: LN on the FFN output, before the add
    trunk_norm: bool = False  # post-LN: LN(x + F(x)) on the trunk itself
    shortcut_scale: bool = False  # DeepNorm: alpha multiplies the shortcut x, not the branch
    head_scale: bool = False  # NormFormer: a learned scale per head, before W_o
    ffn_mid_norm: bool = False  # NormFormer: LN after the FFN activation (width d_ff)
    branch_scale: bool = False  # alpha on the branch instead: labml's DeepNorm bug (their issue #145)
    shortcut_normed: bool = False  # the shortcut carries in_norm(x), not x (ChatGLM-6B's GLMBlock)
    ffn_resid_scale: bool = False  # NormFormer's --scale-resids: a learned per-channel scale on the FFN shortcut
    head_scale_after_o: bool = False  # with head_scale: scale W_o's output chunks, as fairseq does (#3973)
    # ReZero (2003.04887): x + a * F(x), a learned scalar per block (the authors' "resweight", one for
    # both sub-layers) that starts at 0, so every block starts as the identity and no norm is needed.
    resweight: bool = False
    omit_final_norm: bool = False  # ReZero's stack has no final norm either, though its trunk is never normed
    # Admin (2004.08249): LN(omega * x + F(x)), omega a learned per-channel vector per sub-layer whose
    # start (`admin_init`, a profiling pass) bounds how much each block leans on its own branch.
    shortcut_omega: bool = False
    # LayerNorm Scaling (2502.05795): in_norm's output times 1/sqrt(l) in block l, so that pre-LN's
    # output variance stops growing with depth and deep blocks stop collapsing toward the identity.
    in_norm_scale: Optional[float] = None

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name != "in_norm_scale" and not isinstance(getattr(self, f.name), bool):
                raise ValueError(f"Placement.{f.name} must be True or False, got {getattr(self, f.name)!r}")
        if self.shortcut_scale and self.branch_scale:
            raise ValueError("shortcut_scale and branch_scale both apply DeepNorm's alpha (twice): pick one")
        if self.head_scale_after_o and not self.head_scale:
            raise ValueError("head_scale_after_o says where the head scale goes: it needs head_scale=True")
        if self.in_norm_scale is None:
            return
        scale = self.in_norm_scale
        if not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and 0 < scale < math.inf):
            raise ValueError(f"in_norm_scale must be None or a finite number > 0, got {scale!r}")
        if not self.in_norm:
            raise ValueError("in_norm_scale scales in_norm's output: it needs in_norm=True")

    @property
    def final_norm(self) -> bool:
        """A stack needs a final norm before the LM head exactly when its trunk is never normed
        (ReZero, ``omit_final_norm``, keeps its head on the raw trunk as its paper does)."""
        return not (self.trunk_norm or self.omit_final_norm)


VARIANTS: dict[str, Placement] = {
    "post": Placement(trunk_norm=True),  # Vaswani et al. 2017 (1706.03762)
    "pre": Placement(in_norm=True),  # GPT-2; Xiong et al. 2020 (2002.04745)
    "sandwich": Placement(in_norm=True, attn_out_norm=True, ffn_out_norm=True),  # CogView 2105.13290
    "deepnorm": Placement(trunk_norm=True, shortcut_scale=True),  # DeepNet 2203.00555
    "normformer": Placement(in_norm=True, attn_out_norm=True, head_scale=True, ffn_mid_norm=True),  # 2110.09456
    "reordered": Placement(attn_out_norm=True, ffn_out_norm=True),  # OLMo 2 (2501.00656): x + Norm(F(x))
    "rezero": Placement(resweight=True, omit_final_norm=True),  # Bachlechner et al. 2020 (2003.04887)
    # Liu et al. 2020 (2004.08249). Until `admin_init` profiles omega (train.run does) it is 1: post-LN.
    "admin": Placement(trunk_norm=True, shortcut_omega=True),
}
# "gemma_rms" is RMSNorm with gain (1 + weight), weight initialised to 0, as Gemma computes it.
# "dyt" is no norm at all but DyT, gamma * tanh(alpha * x) + beta, in every norm's place (2503.10622).
NORM_KINDS = ("layer", "rms", "gemma_rms", "dyt")
# What QK-norm normalises: "head" each head's q and k over d_head (Qwen3, Gemma 3; ViT-22B with
# LayerNorm), "full" the whole projection before the head split (OLMo 2), "l2" each head's q and k
# to unit length with a learned scale g in place of 1/sqrt(d_head) (Henry et al. 2020). True = "head".
QK_NORMS = ("head", "full", "l2")
INIT_SCHEMES = ("gpt2", "xavier", "torch")
ACTIVATIONS = ("gelu", "relu")


def placement(norm: Union[str, Placement]) -> Placement:
    """The `Placement` for a variant name (or pass one through), with an error that lists the names."""
    if isinstance(norm, Placement):
        return norm
    if not isinstance(norm, str):
        raise ValueError(
            f"a block takes one placement, a variant name ({', '.join(VARIANTS)}) or a Placement, got {norm!r}; "
            "one placement per block (a list) goes to TransformerLM(norm=...)"
        )
    if norm in LAYERWISE:
        raise ValueError(
            f"{norm!r} gives each block of a stack its own placement: pass it to TransformerLM, or pick a "
            f"block's from {LAYERWISE[norm].__name__}(n_layers); valid choices here: {', '.join(VARIANTS)}"
        )
    if norm not in VARIANTS:
        raise ValueError(f"unknown norm placement {norm!r}; valid choices: {', '.join(VARIANTS)}")
    return VARIANTS[norm]


def mix_ln(n_layers: int, post_fraction: float = 0.25) -> tuple[Placement, ...]:
    """Mix-LN (Li et al. 2024, 2412.13795): post-LN in the first floor(post_fraction * n_layers)
    blocks, pre-LN in the rest, for gradient norms more even across depth than pre-LN's (small in
    the deep blocks) or post-LN's (vanishing in the early ones). 0.25 is the paper's default (its
    scripts: 3 of 12 layers at 71M, 6 of 24 at 1B). The stack ends in pre-LN blocks, so it keeps
    pre-LN's final norm."""
    _positive(n_layers=n_layers)
    if isinstance(post_fraction, bool) or not (isinstance(post_fraction, (int, float)) and 0.0 <= post_fraction <= 1.0):
        raise ValueError(f"post_fraction must be a number in [0, 1], got {post_fraction!r}")
    k = math.floor(post_fraction * n_layers)
    return (VARIANTS["post"],) * k + (VARIANTS["pre"],) * (n_layers - k)


def layernorm_scaling(n_layers: int) -> tuple[Placement, ...]:
    """LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in LLMs", 2502.05795): pre-LN whose
    in-norm output in block l (counted from 1) is multiplied by 1/sqrt(l); block 1 is plain pre-LN."""
    _positive(n_layers=n_layers)
    return tuple(replace(VARIANTS["pre"], in_norm_scale=1.0 / math.sqrt(depth)) for depth in range(1, n_layers + 1))


# Names whose blocks differ along the stack: each maps n_layers to one Placement per block.
LAYERWISE: dict[str, Callable[[int], tuple[Placement, ...]]] = {"mixln": mix_ln, "lnscaled": layernorm_scaling}


def placements(norm: Union[str, Placement, Sequence[Union[str, Placement]]], n_layers: int) -> tuple[Placement, ...]:
    """One `Placement` per block of an ``n_layers`` stack: a name in `VARIANTS` or a Placement gives
    every block the same one, a name in `LAYERWISE` its per-layer sequence, and a sequence of names
    or Placements one per block (it must have ``n_layers`` of them)."""
    _positive(n_layers=n_layers)
    if isinstance(norm, str) and norm in LAYERWISE:
        return LAYERWISE[norm](n_layers)
    if isinstance(norm, (str, Placement)):
        if isinstance(norm, str) and norm not in VARIANTS:
            names = ", ".join([*VARIANTS, *LAYERWISE])
            raise ValueError(f"unknown norm placement {norm!r}; valid choices: {names}, or one Placement per block")
        return (placement(norm),) * n_layers
    if not isinstance(norm, Sequence):
        raise ValueError(f"norm must be a variant name, a Placement or one of them per block, got {norm!r}")
    per_block = tuple(placement(p) for p in norm)
    if len(per_block) != n_layers:
        raise ValueError(f"norm gives {len(per_block)} placements for n_layers={n_layers}: it needs one per block")
    return per_block


def qk_norm_kind(qk_norm: Union[bool, str, None]) -> Optional[str]:
    """The QK-norm kind a ``qk_norm`` argument names: None (off), or one of `QK_NORMS` (True is "head")."""
    if qk_norm is None or qk_norm is False:
        return None
    if qk_norm is True:
        return "head"
    if isinstance(qk_norm, str) and qk_norm in QK_NORMS:
        return qk_norm
    raise ValueError(f"qk_norm must be False, True or one of {', '.join(QK_NORMS)}; got {qk_norm!r}")


def _choice(value: str, choices: tuple[str, ...], what: str) -> str:
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; valid choices: {', '.join(choices)}")
    return value


def _rates(**rates: float) -> None:
    for name, rate in rates.items():
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate < 1.0:
            raise ValueError(f"{name} must be a number in [0, 1), got {rate!r}")


def _positive(**sizes: int) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


# --------------------------------------------------------------------------------------------
# DeepNorm's constants.
# --------------------------------------------------------------------------------------------


class DeepNormCoefficients(NamedTuple):
    alpha: float  # multiplies the shortcut: x <- LN(alpha * x + G(x))
    beta: float  # Xavier-normal gain on W_v, W_o, fc1, fc2 (W_q, W_k keep gain 1)


def deepnorm_coefficients(
    encoder_layers: int = 0, decoder_layers: int = 0
) -> tuple[Optional[DeepNormCoefficients], Optional[DeepNormCoefficients]]:
    """DeepNorm's (alpha, beta) for the encoder and the decoder, from Wang et al. 2022 (2203.00555).

    Pass ``encoder_layers=N`` alone for an encoder-only stack, ``decoder_layers=M`` alone for a
    decoder-only stack, both for an encoder-decoder; the absent part comes back as None.
    N and M count blocks, not sub-layers.

    ====================  ===================  ====================
    architecture          alpha                beta
    ====================  ===================  ====================
    encoder-only (N)      (2N)^(1/4)           (8N)^(-1/4)
    decoder-only (M)      (2M)^(1/4)           (8M)^(-1/4)
    enc-dec, encoder      0.81 (N^4 M)^(1/16)  0.87 (N^4 M)^(-1/16)
    enc-dec, decoder      (3M)^(1/4)           (12M)^(-1/4)
    ====================  ===================  ====================

    (torchscale uses 1.15 for the encoder-decoder encoder beta; the paper's 0.87 is used here.)
    """
    for name, value in (("encoder_layers", encoder_layers), ("decoder_layers", decoder_layers)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} counts blocks: it must be an integer >= 0, got {value!r}")
    if encoder_layers < 0 or decoder_layers < 0 or encoder_layers + decoder_layers == 0:
        raise ValueError(
            f"need encoder_layers >= 0 and decoder_layers >= 0, not both 0; got {encoder_layers}, {decoder_layers}"
        )
    n, m = encoder_layers, decoder_layers
    if m == 0:
        return DeepNormCoefficients((2 * n) ** 0.25, (8 * n) ** -0.25), None
    if n == 0:
        return None, DeepNormCoefficients((2 * m) ** 0.25, (8 * m) ** -0.25)
    encoder = DeepNormCoefficients(0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16))
    decoder = DeepNormCoefficients((3 * m) ** 0.25, (12 * m) ** -0.25)
    return encoder, decoder


# --------------------------------------------------------------------------------------------
# Modules.
# --------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """x / rms(x) * gamma (Zhang & Sennrich 2019, 1910.07467); here so torch 2.2 works too.

    ``unit_offset=True`` is Gemma's parametrisation: gamma = 1 + weight, with weight initialised to
    0 (the same function at init; weight decay then pulls the gain toward 1, not 0). Loading such
    weights into a norm that starts from 1, the porting bug, doubles every gain.
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


def make_norm(kind: str, d: int, eps: float, bias: bool) -> nn.Module:
    if kind == "layer":
        return nn.LayerNorm(d, eps=eps, bias=bias)
    if kind == "dyt":  # no statistic, so no eps
        return DyT(d, bias=bias)
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


class Attention(nn.Module):
    """Multi-head self-attention through `F.scaled_dot_product_attention`.

    ``qk_norm`` (see `QK_NORMS`) normalises q and k per head over d_head ("head", as Qwen3 and
    Gemma 3), over the whole projection before the head split ("full", OLMo 2), or to unit length
    per head with a learned scale g replacing 1/sqrt(d_head) ("l2", Henry et al.; g starts at
    sqrt(d_head), so the logits start at ordinary attention's scale). ``attn_dropout`` drops
    attention probabilities (0 by default, as in fairseq); the dropout on the sub-layer's output
    lives in `Block`, after the branch's last norm. Setting ``record_logits = True`` takes an
    explicit path that stores per-layer logit statistics in ``logit_stats``; only the probes set
    it, on a forward pass of their own.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        qk_norm: Union[bool, str] = False,
        head_scale: bool = False,
        head_scale_after_o: bool = False,
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
        before_o, after_o = head_scale and not head_scale_after_o, head_scale and head_scale_after_o
        self.head_scale = HeadScale(n_heads) if before_o else nn.Identity()
        self.head_scale_out = HeadScale(n_heads, after_o=True) if after_o else nn.Identity()
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
        rows = count > 1
        entropy = (-plogp.sum(-1))[..., rows] / count[rows].log()
        self.logit_stats = {
            # NaN or inf logits give a NaN or inf statistic, never an error: the caller decides.
            "max_logit": logits.abs().masked_fill(~allowed, 0.0).amax().detach(),
            "entropy": entropy.mean().detach(),
        }
        attn = F.dropout(attn, self.attn_dropout, self.training)
        return attn @ v


class MLP(nn.Module):
    """fc2(act(fc1 x)), with NormFormer's optional norm after the activation."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        activation: str = "gelu",
        mid_norm: bool = False,
        norm_kind: str = "layer",
        eps: float = 1e-5,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.mid_norm = make_norm(norm_kind, d_ff, eps, bias) if mid_norm else nn.Identity()
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.mid_norm(self.act(self.fc1(x))))


class Block(nn.Module):
    """One Transformer block; ``norm`` (a name in `VARIANTS` or a `Placement`) says where its norms go.

    ``n_layers`` is the depth of the stack the block lives in: it sets DeepNorm's alpha and beta
    (decoder-only, unless ``deepnorm_alpha``/``deepnorm_beta`` override them) and the GPT-2 init's
    residual scale. ``init`` is one of `INIT_SCHEMES` (see `init_block_`). ``dropout`` acts on each
    sub-layer's output after its last norm, just before the addition (as fairseq), so that a norm
    never undoes dropout's rescaling; ``attn_dropout`` drops attention probabilities.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        norm: Union[str, Placement] = "pre",
        qk_norm: Union[bool, str] = False,
        norm_kind: str = "layer",
        d_ff: Optional[int] = None,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        bias: bool = True,
        activation: str = "gelu",
        eps: float = 1e-5,
        causal: bool = True,
        init: str = "gpt2",
        n_layers: int = 1,
        deepnorm_alpha: Optional[float] = None,
        deepnorm_beta: Optional[float] = None,
    ) -> None:
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        _positive(d_model=d_model, n_heads=n_heads, d_ff=d_ff, n_layers=n_layers)
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.placement = p = placement(norm)
        _choice(norm_kind, NORM_KINDS, "norm_kind")
        _choice(activation, ACTIVATIONS, "activation")
        _choice(init, INIT_SCHEMES, "init")
        _rates(dropout=dropout, attn_dropout=attn_dropout)
        for name, value in (("bias", bias), ("causal", causal)):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be True or False, got {value!r}")
        qk_norm_kind(qk_norm)  # "yes" or "no" would otherwise both switch it on
        if not (isinstance(eps, (int, float)) and eps >= 0):  # 0 is the exact norm (chapter 3 uses it)
            raise ValueError(f"eps must be a number >= 0 (the norms divide by sqrt(var + eps)), got {eps!r}")

        _, coef = deepnorm_coefficients(decoder_layers=n_layers)
        scaled = p.shortcut_scale or p.branch_scale
        for name, value in (("deepnorm_alpha", deepnorm_alpha), ("deepnorm_beta", deepnorm_beta)):
            if value is None:
                continue
            if not scaled:
                raise ValueError(
                    f"{name}={value!r} is given, but this block's placement has no DeepNorm alpha "
                    "(shortcut_scale or branch_scale): it would be ignored"
                )
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        self.alpha = (coef.alpha if deepnorm_alpha is None else deepnorm_alpha) if scaled else 1.0
        self.beta = (coef.beta if deepnorm_beta is None else deepnorm_beta) if scaled else 1.0
        self.shortcut = Scale(self.alpha) if p.shortcut_scale else nn.Identity()
        branch = Scale(self.alpha) if p.branch_scale else nn.Identity()
        # ReZero's a starts at 0: the block is the identity until training moves it.
        self.branch = nn.Sequential(branch, LearnedScale((), 0.0)) if p.resweight else branch
        # NormFormer's --scale-resids: lambda * x on the FFN's shortcut only, lambda learned, init 1.
        resid = LearnedScale(d_model) if p.ffn_resid_scale else nn.Identity()
        ffn_shortcut = nn.Sequential(self.shortcut, resid) if p.ffn_resid_scale else self.shortcut

        # Admin's omega, one per sub-layer: 1 (post-LN) until `admin_init` profiles it. Without it
        # each sub-layer's shortcut is `self.shortcut` itself, so a hook there sees both calls.
        def with_omega(shortcut: nn.Module) -> nn.Module:
            return nn.Sequential(shortcut, LearnedScale(d_model)) if p.shortcut_omega else shortcut

        self.attn_shortcut = with_omega(self.shortcut)
        self.ffn_shortcut = with_omega(ffn_shortcut)
        self.in_scale = Scale(p.in_norm_scale) if p.in_norm_scale is not None else nn.Identity()

        def norm_if(used: bool, width: int = d_model) -> nn.Module:
            return make_norm(norm_kind, width, eps, bias) if used else nn.Identity()

        self.attn_in, self.attn_out, self.attn_trunk = (
            norm_if(p.in_norm),
            norm_if(p.attn_out_norm),
            norm_if(p.trunk_norm),
        )
        self.ffn_in, self.ffn_out, self.ffn_trunk = norm_if(p.in_norm), norm_if(p.ffn_out_norm), norm_if(p.trunk_norm)
        # ChatGLM's shortcut reads the normed input: the same norm module (and parameters) as the branch.
        self.attn_skip = self.attn_in if p.shortcut_normed else nn.Identity()
        self.ffn_skip = self.ffn_in if p.shortcut_normed else nn.Identity()
        self.attn = Attention(
            d_model, n_heads, qk_norm=qk_norm, head_scale=p.head_scale, head_scale_after_o=p.head_scale_after_o,
            norm_kind=norm_kind, eps=eps, bias=bias, attn_dropout=attn_dropout, causal=causal,
        )  # fmt: skip
        self.mlp = MLP(
            d_model, d_ff, activation=activation, mid_norm=p.ffn_mid_norm, norm_kind=norm_kind,
            eps=eps, bias=bias,
        )  # fmt: skip
        self.attn_drop, self.ffn_drop = nn.Dropout(dropout), nn.Dropout(dropout)
        init_block_(self, init, n_layers=n_layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn_sublayer(self.attn_sublayer(x))

    # Every variant's tell-tale lines: the same two, with identities in the unused slots.
    def attn_sublayer(self, x: torch.Tensor) -> torch.Tensor:
        branch = self.attn_drop(self.attn_out(self.attn(self.in_scale(self.attn_in(x)))))
        return self.attn_trunk(self.attn_shortcut(self.attn_skip(x)) + self.branch(branch))

    def ffn_sublayer(self, x: torch.Tensor) -> torch.Tensor:
        branch = self.ffn_drop(self.ffn_out(self.mlp(self.in_scale(self.ffn_in(x)))))
        return self.ffn_trunk(self.ffn_shortcut(self.ffn_skip(x)) + self.branch(branch))


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
    deepnorm = block.placement.shortcut_scale or block.placement.branch_scale
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


def _inside_transform(t: torch.Tensor) -> bool:
    """True for a tensor inside torch.func's vmap or grad (as in `normlab.batched`), where a check
    that reads its values cannot run; the ids there come from the corpus and are in range."""
    wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
    return bool(wrapped is not None and wrapped(t))


class TransformerLM(nn.Module):
    """A decoder-only causal LM: token + learned position embeddings, `n_layers` Blocks, final norm
    exactly when the last block's placement needs one (`Placement.final_norm`), untied LM head.

    ``norm`` is anything `placements` takes: a variant name or a `Placement` for every block, a name
    in `LAYERWISE` ("mixln", "lnscaled"), or one name or Placement per block. ``placements`` keeps
    the blocks' placements; ``placement`` is their common one, or None when they differ.
    ``deepnorm_alpha`` / ``deepnorm_beta`` override DeepNorm's constants in every block (for
    DeepNet's Post-LN-init baseline, alpha = beta = 1, or GLM-130B's alpha = (2N)^(1/2)).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        *,
        norm: Union[str, Placement, Sequence[Union[str, Placement]]] = "pre",
        qk_norm: Union[bool, str] = False,
        max_seq_len: int = 256,
        norm_kind: str = "layer",
        d_ff: Optional[int] = None,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        bias: bool = True,
        activation: str = "gelu",
        eps: float = 1e-5,
        init: str = "gpt2",
        deepnorm_alpha: Optional[float] = None,
        deepnorm_beta: Optional[float] = None,
    ) -> None:
        super().__init__()
        _positive(vocab_size=vocab_size, d_model=d_model, n_heads=n_heads, n_layers=n_layers, max_seq_len=max_seq_len)
        _rates(dropout=dropout, attn_dropout=attn_dropout)
        self.placements = per_block = placements(norm, n_layers)
        self.placement: Optional[Placement] = per_block[0] if len(set(per_block)) == 1 else None
        self.max_seq_len = max_seq_len
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_seq_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(
                d_model,
                n_heads,
                norm=p,
                qk_norm=qk_norm,
                norm_kind=norm_kind,
                d_ff=d_ff,
                dropout=dropout,
                attn_dropout=attn_dropout,
                bias=bias,
                activation=activation,
                eps=eps,
                init=init,
                n_layers=n_layers,
                deepnorm_alpha=deepnorm_alpha,
                deepnorm_beta=deepnorm_beta,
            )  # fmt: skip
            for p in per_block
        )
        self.final_norm = make_norm(norm_kind, d_model, eps, bias) if per_block[-1].final_norm else nn.Identity()
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        if init == "xavier":
            # Token and position embeddings N(0, 1/2) each, so x_0 has unit variance per coordinate
            # (E||x_0||^2 = d), the starting point of Xiong et al.'s Lemma 2.
            nn.init.normal_(self.tok.weight, std=math.sqrt(0.5))
            nn.init.normal_(self.pos.weight, std=math.sqrt(0.5))
            nn.init.xavier_normal_(self.head.weight)
        elif init == "gpt2":
            for w in (self.tok.weight, self.pos.weight, self.head.weight):
                nn.init.normal_(w, std=0.02)

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """x_0, the start of the residual stream."""
        if idx.dim() != 2:
            raise ValueError(f"idx must be [batch, time], got shape {tuple(idx.shape)}")
        if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
            raise ValueError(f"idx must hold integer token ids (torch.long), got dtype {idx.dtype}")
        vocab = self.tok.num_embeddings
        if idx.numel() and not _inside_transform(idx) and not (0 <= int(idx.min()) and int(idx.max()) < vocab):
            raise ValueError(
                f"token ids must be in [0, vocab_size={vocab}), got ids from {int(idx.min())} to {int(idx.max())}"
            )
        t = idx.shape[1]
        if t > self.max_seq_len:
            raise ValueError(f"sequence length {t} exceeds max_seq_len={self.max_seq_len}")
        return self.drop(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)))

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """The final hidden state F(x; theta) that the LM head reads: [B, T, d]."""
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.final_norm(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.hidden(idx))


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
    if not all(block.placement.shortcut_omega for block in model.blocks):
        raise ValueError(
            "admin_init needs every block to have Admin's omega (Placement.shortcut_omega, as in "
            "VARIANTS['admin']); this model's blocks do not"
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
            omega = shortcut[-1]  # Admin's omega comes last, after any alpha or lambda
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
