"""Where the norms go, as data: a `Placement` says how each sub-layer joins the residual stream
(`Wrap`), what multiplies the branches, and what sits inside; `VARIANTS` is the table of them.

Each sub-layer F (attention, then the FFN) of a block computes

    x <- trunk( shortcut * skip(x) + branch * out( F( in(x) * in_scale ) ) )

A filled norm slot (in, out, trunk) is a norm, an empty one the identity; ``skip`` is ``in`` for a
normed shortcut (ChatGLM-6B) and the identity otherwise. Invalid combinations are refused here,
when the placement is built, with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Callable, NamedTuple, Optional, Sequence, Union

__all__ = [
    "Shortcut",
    "Branch",
    "HEAD_SCALES",
    "Wrap",
    "Placement",
    "VARIANTS",
    "LAYERWISE",
    "placement",
    "placements",
    "mix_ln",
    "layernorm_scaling",
    "DeepNormCoefficients",
    "deepnorm_coefficients",
]


class Shortcut(Enum):
    """What multiplies a sub-layer's shortcut."""

    ONE = "1"  # x itself
    ALPHA = "alpha"  # DeepNorm's constant alpha (2203.00555): LN(alpha x + F(x))
    OMEGA = "omega"  # Admin's learned per-channel omega (2004.08249), profiled by `admin_init`
    LAMBDA = "lambda"  # NormFormer's --scale-resids: a learned per-channel lambda, starting at 1


class Branch(Enum):
    """What multiplies both sub-layers' branches (one module serves both, so one value per block)."""

    ONE = "1"
    ALPHA = "alpha"  # DeepNorm's alpha on the branch instead of the shortcut: labml's bug (their #145)
    GATE = "gate"  # ReZero's learned scalar per block, starting at 0 (2003.04887): x + a F(x)


# NormFormer's per-head scale: before W_o, as the paper writes it, or on W_o's output chunks, as
# fairseq's --scale-heads computes it (their issue #3973).
HEAD_SCALES = ("before_o", "after_o")


@dataclass(frozen=True)
class Wrap:
    """How one sub-layer joins the residual stream: its norm slots and its shortcut."""

    norm_in: bool = False  # pre-LN: F reads Norm(x)
    norm_out: bool = False  # sandwich, reordered, NormFormer's attention: Norm(F(...)) before the add
    norm_trunk: bool = False  # post-LN: Norm(x + F(x)) on the trunk itself
    shortcut: Shortcut = Shortcut.ONE
    shortcut_normed: bool = False  # the shortcut carries Norm(x), the branch's own input (ChatGLM-6B)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name != "shortcut" and not isinstance(getattr(self, f.name), bool):
                raise ValueError(f"Wrap.{f.name} must be True or False, got {getattr(self, f.name)!r}")
        if not isinstance(self.shortcut, Shortcut):
            raise ValueError(f"Wrap.shortcut must be a Shortcut ({', '.join(s.name for s in Shortcut)}), "
                             f"got {self.shortcut!r}")  # fmt: skip
        if self.shortcut_normed and not self.norm_in:
            raise ValueError("shortcut_normed puts the sub-layer's input norm on the shortcut: it needs norm_in=True")


@dataclass(frozen=True)
class Placement:
    """A block's norm placement: how attention and the FFN are wrapped, what multiplies their
    branches, NormFormer's two additions inside them, a per-block scale on the input norms' output
    (LayerNorm Scaling) and whether a stack of such blocks ends in a final norm (None: exactly
    when its trunk is never normed). Two variants differ in the fields that differ."""

    attn: Wrap
    ffn: Wrap
    branch: Branch = Branch.ONE
    head_scale: Optional[str] = None  # one of HEAD_SCALES: NormFormer's per-head scale in attention
    ffn_mid_norm: bool = False  # NormFormer: a norm after the FFN's activation (width d_ff)
    in_scale: Optional[float] = None  # LayerNorm Scaling (2502.05795): in-norm output times 1/sqrt(l)
    final_norm: Optional[bool] = None

    @classmethod
    def same(cls, wrap: Wrap, **rest: object) -> Placement:
        """Both sub-layers wrapped alike, as in every variant but NormFormer."""
        return cls(attn=wrap, ffn=wrap, **rest)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        for name in ("attn", "ffn"):
            if not isinstance(getattr(self, name), Wrap):
                raise ValueError(f"Placement.{name} must be a Wrap, got {getattr(self, name)!r}")
        if not isinstance(self.branch, Branch):
            raise ValueError(f"Placement.branch must be a Branch ({', '.join(b.name for b in Branch)}), "
                             f"got {self.branch!r}")  # fmt: skip
        if self.head_scale is not None and self.head_scale not in HEAD_SCALES:
            raise ValueError(f"Placement.head_scale must be None or one of {', '.join(HEAD_SCALES)}, "
                             f"got {self.head_scale!r}")  # fmt: skip
        if not isinstance(self.ffn_mid_norm, bool):
            raise ValueError(f"Placement.ffn_mid_norm must be True or False, got {self.ffn_mid_norm!r}")
        if self.final_norm is not None and not isinstance(self.final_norm, bool):
            raise ValueError(f"Placement.final_norm must be None, True or False, got {self.final_norm!r}")
        if self.branch is Branch.ALPHA and Shortcut.ALPHA in (self.attn.shortcut, self.ffn.shortcut):
            raise ValueError("alpha on the shortcut and on the branch applies DeepNorm's alpha twice: pick one")
        if self.in_scale is not None:
            scale = self.in_scale
            if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
                raise ValueError(f"in_scale must be None or a finite number > 0, got {scale!r}")
            if not (self.attn.norm_in and self.ffn.norm_in):
                raise ValueError("in_scale scales the input norms' output: it needs norm_in in both sub-layers")

    def describe(self) -> str:
        """One line for a reader: what each sub-layer's slots hold, and the rest that is set."""

        def wrap(w: Wrap) -> str:
            parts = [f"{slot} norm" for slot, on in (("in", w.norm_in), ("out", w.norm_out), ("trunk", w.norm_trunk))
                     if on]  # fmt: skip
            if w.shortcut is not Shortcut.ONE:
                parts.append(f"shortcut × {w.shortcut.value}")
            if w.shortcut_normed:
                parts.append("the normed input on the shortcut")
            return ", ".join(parts) or "no norm"

        text = f"both sub-layers: {wrap(self.attn)}" if self.attn == self.ffn else (
            f"attention: {wrap(self.attn)}; FFN: {wrap(self.ffn)}")  # fmt: skip
        if self.branch is not Branch.ONE:
            text += f"; branches × {self.branch.value}"
        if self.head_scale:
            text += f"; head scale {self.head_scale.replace('_', ' ')}"
        if self.ffn_mid_norm:
            text += "; a norm after the FFN's activation"
        if self.in_scale is not None:
            text += f"; input norms × {self.in_scale:.3g}"
        return text + f"; final norm: {'yes' if self.ends_with_norm else 'no'}"

    def to_dict(self) -> dict[str, object]:
        """The fields as JSON values (enums by their value)."""

        def wrap(w: Wrap) -> dict[str, object]:
            return {f.name: getattr(w, f.name).value if f.name == "shortcut" else getattr(w, f.name) for f in fields(w)}

        out: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(attn=wrap(self.attn), ffn=wrap(self.ffn), branch=self.branch.value)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Placement:
        """The Placement `to_dict` described."""

        def wrap(w: object) -> Wrap:
            if not isinstance(w, dict):
                raise ValueError(f"a Placement's sub-layer must be a dict of Wrap fields, got {w!r}")
            return Wrap(**{**w, "shortcut": Shortcut(w.get("shortcut", "1"))})

        rest = {k: v for k, v in d.items() if k not in ("attn", "ffn", "branch")}
        return cls(attn=wrap(d["attn"]), ffn=wrap(d["ffn"]), branch=Branch(d.get("branch", "1")), **rest)  # type: ignore[arg-type]

    @property
    def wraps(self) -> tuple[Wrap, Wrap]:
        return self.attn, self.ffn

    @property
    def uses_alpha(self) -> bool:
        """DeepNorm's constants apply: alpha on a shortcut or the branches (and beta in the init)."""
        return self.branch is Branch.ALPHA or any(w.shortcut is Shortcut.ALPHA for w in self.wraps)

    @property
    def uses_omega(self) -> bool:
        """Admin's omega is on a shortcut: the model needs `admin_init`'s profiling pass."""
        return any(w.shortcut is Shortcut.OMEGA for w in self.wraps)

    @property
    def ends_with_norm(self) -> bool:
        """Whether a stack of these blocks ends in a final norm before the LM head: ``final_norm``,
        or, when that is None, exactly when the trunk is never normed."""
        if self.final_norm is not None:
            return self.final_norm
        return not any(w.norm_trunk for w in self.wraps)


PRE, POST = Wrap(norm_in=True), Wrap(norm_trunk=True)
VARIANTS: dict[str, Placement] = {
    "post": Placement.same(POST),  # Vaswani et al. 2017 (1706.03762)
    "pre": Placement.same(PRE),  # GPT-2; Xiong et al. 2020 (2002.04745)
    "sandwich": Placement.same(Wrap(norm_in=True, norm_out=True)),  # CogView (2105.13290)
    "deepnorm": Placement.same(Wrap(norm_trunk=True, shortcut=Shortcut.ALPHA)),  # DeepNet (2203.00555)
    "normformer": Placement(  # Shleifer et al. 2021 (2110.09456)
        attn=Wrap(norm_in=True, norm_out=True), ffn=PRE, head_scale="before_o", ffn_mid_norm=True
    ),
    "reordered": Placement.same(Wrap(norm_out=True)),  # OLMo 2 (2501.00656): x + Norm(F(x))
    "rezero": Placement.same(Wrap(), branch=Branch.GATE, final_norm=False),  # Bachlechner et al. (2003.04887)
    # Liu et al. 2020 (2004.08249). Until `admin_init` profiles omega (normlab.run does) it is 1: post-LN.
    "admin": Placement.same(Wrap(norm_trunk=True, shortcut=Shortcut.OMEGA)),
}


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


def _blocks(n_layers: object) -> int:
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers <= 0:
        raise ValueError(f"n_layers must be a positive integer, got {n_layers!r}")
    return n_layers


def mix_ln(n_layers: int, post_fraction: float = 0.25) -> tuple[Placement, ...]:
    """Mix-LN (Li et al. 2024, 2412.13795): post-LN in the first floor(post_fraction * n_layers)
    blocks, pre-LN in the rest, for gradient norms more even across depth than pre-LN's (small in
    the deep blocks) or post-LN's (vanishing in the early ones). 0.25 is the paper's default (its
    scripts: 3 of 12 layers at 71M, 6 of 24 at 1B). The stack ends in pre-LN blocks, so it keeps
    pre-LN's final norm."""
    _blocks(n_layers)
    if isinstance(post_fraction, bool) or not (isinstance(post_fraction, (int, float)) and 0.0 <= post_fraction <= 1.0):
        raise ValueError(f"post_fraction must be a number in [0, 1], got {post_fraction!r}")
    k = math.floor(post_fraction * n_layers)
    return (VARIANTS["post"],) * k + (VARIANTS["pre"],) * (n_layers - k)


def layernorm_scaling(n_layers: int) -> tuple[Placement, ...]:
    """LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in LLMs", 2502.05795): pre-LN whose
    in-norm output in block l (counted from 1) is multiplied by 1/sqrt(l); block 1 is plain pre-LN."""
    _blocks(n_layers)
    return tuple(replace(VARIANTS["pre"], in_scale=1.0 / math.sqrt(depth)) for depth in range(1, n_layers + 1))


# Names whose blocks differ along the stack: each maps n_layers to one Placement per block.
LAYERWISE: dict[str, Callable[[int], tuple[Placement, ...]]] = {"mixln": mix_ln, "lnscaled": layernorm_scaling}


def placements(norm: Union[str, Placement, Sequence[Union[str, Placement]]], n_layers: int) -> tuple[Placement, ...]:
    """One `Placement` per block of an ``n_layers`` stack: a name in `VARIANTS` or a Placement gives
    every block the same one, a name in `LAYERWISE` its per-layer sequence, and a sequence of names
    or Placements one per block (it must have ``n_layers`` of them)."""
    _blocks(n_layers)
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
