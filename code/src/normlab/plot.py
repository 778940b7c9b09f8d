"""One plotting style for the whole book: a fixed colour per variant (Okabe-Ito, colour-blind safe),
seed spread as bands, diverged runs marked rather than drawn as NaN, and block diagrams drawn
from the same `Placement` data that builds the blocks.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from .ngram import NgramLevels
from .variants import LAYERWISE, Branch, Placement, Shortcut, placement, placements

__all__ = [
    "VARIANT_COLORS", "OUTCOME_MARKERS", "use_style", "color", "label", "band", "mark_diverged", "ngram_lines",
    "draw_block", "glue",
]  # fmt: skip

# Okabe & Ito (2008): distinguishable under the common colour-vision deficiencies.
VARIANT_COLORS = {
    "post": "#D55E00",  # vermillion
    "pre": "#0072B2",  # blue
    "sandwich": "#009E73",  # bluish green
    "deepnorm": "#CC79A7",  # reddish purple
    "normformer": "#E69F00",  # orange
    "reordered": "#56B4E9",  # sky blue
    "rezero": "#000000",  # black: the last Okabe-Ito colour but yellow, which the norm boxes use
    # Okabe-Ito has no more: these come from Paul Tol's "muted" scheme, also colour-blind safe.
    "admin": "#882255",  # wine
    "mixln": "#999933",  # olive
    "lnscaled": "#332288",  # indigo
}
_LABELS = {
    "post": "post-LN",
    "pre": "pre-LN",
    "sandwich": "sandwich",
    "deepnorm": "DeepNorm",
    "normformer": "NormFormer",
    "reordered": "reordered",  # OLMo 2's block without the QK-norm OLMo 2 ships with it
    "reordered+qk": "reordered + QK-norm (OLMo 2)",
    "pre+qk": "pre-LN + QK-norm",
    "sandwich+qk": "sandwich + QK-norm",
    "rezero": "ReZero",
    "admin": "Admin",
    "mixln": "Mix-LN",
    "lnscaled": "LayerNorm Scaling",
}
OUTCOME_MARKERS = {"trained": "o", "stalled": "s", "diverged": "x"}


def use_style() -> None:
    """The book's matplotlib defaults: readable sizes, light grid, no top/right spines."""
    plt.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": 110,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "legend.fontsize": 9,
            "legend.frameon": False,
        }
    )


def color(variant: str) -> str:
    """The variant's colour in every chapter; a ``+qk`` suffix keeps the base variant's colour."""
    base = variant.split("+")[0]
    if base not in VARIANT_COLORS:
        raise ValueError(f"no colour for {variant!r}; valid choices: {', '.join(VARIANT_COLORS)}")
    return VARIANT_COLORS[base]


def label(variant: str, qk_norm: bool = False) -> str:
    return _LABELS.get(variant, variant) + (" + QK-norm" if qk_norm else "")


def band(
    ax: Axes,
    x: Sequence[float],
    ys: Union[np.ndarray, Sequence[Sequence[float]]],
    variant: str,
    *,
    qk_norm: bool = False,
    text: Optional[str] = None,
    quantiles: tuple[float, float] = (0.1, 0.9),
    **kwargs,
) -> None:
    """Median over seeds (rows of ``ys``) as a line, the ``quantiles`` range as a shaded band."""
    ys = np.asarray(ys, dtype=float)
    ys = ys[None, :] if ys.ndim == 1 else ys
    c = color(variant)
    ls = "--" if qk_norm or variant.endswith("+qk") else "-"
    n = ys.shape[0]
    ax.plot(x, np.nanmedian(ys, 0), color=c, ls=ls, label=text or f"{label(variant, qk_norm)} ({n} seeds)", **kwargs)
    if n > 1:
        lo, hi = np.nanquantile(ys, quantiles, axis=0)
        ax.fill_between(x, lo, hi, color=c, alpha=0.2, lw=0)


def mark_diverged(ax: Axes, x: float, y: float, variant: str) -> None:
    """A run that diverged ends in a cross at its last finite point, never in a NaN gap."""
    ax.plot([x], [y], marker=OUTCOME_MARKERS["diverged"], ms=9, mew=2, color=color(variant), ls="none")
    ax.annotate("diverged", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8, color=color(variant))


# The n-gram levels: grey, dotted, one dash pattern each, so they never read as a variant's curve.
_LEVEL_STYLE = {"unigram": (0.55, (1, 1)), "bigram": (0.4, (1, 2)), "trigram": (0.2, (1, 3)), "fourgram": (0.0, (1, 4))}


def ngram_lines(ax: Axes, levels: NgramLevels, which: Sequence[str] = ("unigram", "bigram", "trigram")) -> None:
    """The unigram, bigram and trigram levels (`normlab.ngram_levels`; "fourgram" where runs get past
    the trigram) as horizontal lines on a loss axis, labelled in the legend: what a run's loss means,
    byte frequencies, the previous byte, or more context than two bytes."""
    for name in which:
        grey, dashes = _LEVEL_STYLE[name]
        value = getattr(levels, name)
        text = "4-gram" if name == "fourgram" else name
        ax.axhline(value, color=str(grey), ls=(0, dashes), lw=1.2, label=f"{text} level ({value:.2f})")


# --------------------------------------------------------------------------------------------
# Block diagrams, generated from a Placement.
# --------------------------------------------------------------------------------------------

_BOX = {"norm": "#F0E442", "sub": "#DDEEFF", "add": "#FFFFFF"}


def _box(ax: Axes, y: float, text: str, kind: str, x: float = 0.5, w: float = 0.5) -> None:
    ax.add_patch(
        FancyBboxPatch((x - w / 2, y - 0.28), w, 0.56, boxstyle="round,pad=0.02", fc=_BOX[kind], ec="0.2", lw=1)
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=9)


def _arrow(ax: Axes, xy0: tuple[float, float], xy1: tuple[float, float], **kw) -> None:
    ax.add_patch(FancyArrowPatch(xy0, xy1, arrowstyle="-|>", mutation_scale=10, lw=1.2, color="0.2", **kw))


def _in_norm_text(norm_label: str, scale: Optional[float]) -> str:
    if scale is None:
        return norm_label
    depth = round(scale**-2)  # LayerNorm Scaling's 1/sqrt(l) reads better as what it is
    return f"{norm_label}/√{depth}" if abs(depth**-0.5 - scale) < 1e-9 else f"{norm_label}·{scale:.3g}"


def draw_block(
    ax: Axes,
    norm: Union[str, Placement, Sequence[Union[str, Placement]]],
    *,
    title: Optional[str] = None,
    norm_label: str = "LN",
    layer: int = 1,
    n_layers: int = 12,
) -> None:
    """Draw one block (attention then FFN sub-layer) bottom to top, reading the norm slots from
    the variant's `Placement`, so the picture cannot disagree with the code.

    For a stack whose blocks differ (a name in `LAYERWISE`, or one placement per block) it draws
    block ``layer`` (from 1) of an ``n_layers`` stack, and says which in the title."""
    layered = not isinstance(norm, (str, Placement)) or norm in LAYERWISE
    if layered:
        stack = placements(norm, n_layers)
        if not (isinstance(layer, int) and 1 <= layer <= len(stack)):
            raise ValueError(f"layer must be a block number in 1..{len(stack)}, got {layer!r}")
        p = stack[layer - 1]
    else:
        p = placement(norm)
    name = norm if isinstance(norm, str) else "custom"
    x_trunk, x_branch, h = 0.12, 0.62, 0.28  # h: half a box's height
    # ReZero writes its learned gate alpha too (x + alpha F(x)); the title says whose alpha it is.
    branch_text = "α·" if p.branch in (Branch.ALPHA, Branch.GATE) else ""
    in_text = _in_norm_text(norm_label, p.in_scale)
    y = -0.2
    ax.text(x_trunk, y - 0.3, "x", ha="center", va="center", fontsize=11, style="italic")
    for sub, wrap in (("Attention", p.attn), ("FFN", p.ffn)):
        shortcut = f"{norm_label}(x)" if wrap.shortcut_normed else "x"
        shortcut = {Shortcut.ALPHA: "α·", Shortcut.OMEGA: "ω⊙", Shortcut.LAMBDA: "λ·"}.get(wrap.shortcut, "") + shortcut
        add_text = f"+ {branch_text}" if shortcut == "x" else f"{shortcut} + {branch_text}".rstrip()
        add_text = "+" if add_text == "+ " else add_text.rstrip()
        add_w = 0.2 + 0.035 * (len(add_text) - 1)
        items = [(in_text, "norm")] if wrap.norm_in else []
        inner = sub
        if sub == "Attention" and p.head_scale:
            inner += "\n+ head scale" + (" after W_o" if p.head_scale == "after_o" else "")
        if sub == "FFN" and p.ffn_mid_norm:
            inner += f"\n+ {norm_label} after act"
        items.append((inner, "sub"))
        if wrap.norm_out:
            items.append((norm_label, "norm"))
        ys = [y + 0.8 + 0.8 * i for i in range(len(items))]
        _arrow(ax, (x_trunk, y + 0.25), (x_branch - 0.1, ys[0] - h))  # the branch taps the trunk
        for i, ((text, kind), yy) in enumerate(zip(items, ys)):
            _box(ax, yy, text, kind, x=x_branch, w=0.6)
            if i:
                _arrow(ax, (x_branch, ys[i - 1] + h), (x_branch, yy - h))
        y_add = ys[-1] + 0.8
        _arrow(ax, (x_trunk, y), (x_trunk, y_add - h))  # the shortcut
        _arrow(ax, (x_branch, ys[-1] + h), (x_trunk + add_w / 2, y_add))  # the branch joins it
        _box(ax, y_add, add_text, "add", x=x_trunk, w=add_w)
        y = y_add + h
        if wrap.norm_trunk:
            _arrow(ax, (x_trunk, y), (x_trunk, y + 0.25))
            _box(ax, y + 0.25 + h, norm_label, "norm", x=x_trunk, w=0.22)
            y += 0.25 + 2 * h
    _arrow(ax, (x_trunk, y), (x_trunk, y + 0.35))
    ax.text(x_trunk, y + 0.55, "y", ha="center", va="center", fontsize=11, style="italic")
    ax.set_xlim(-0.1, 0.95)
    ax.set_ylim(-0.8, y + 0.8)
    ax.axis("off")
    default = f"{label(name)}, block {layer} of {n_layers}" if layered else label(name)
    ax.set_title(title or default, color=VARIANT_COLORS.get(name, "0.1"), fontsize=11)


def glue(name: str, fig) -> None:
    """Let the book's text show ``fig`` (myst-nb's glue: a figure or a value). Where myst-nb is not
    installed (Colab) a value, text or a number, is printed as ``[name] value``, the line the Colab
    edition's text points to (scripts/colab_edition.py); a figure is shown by the cell that draws it."""
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        if not hasattr(fig, "savefig"):  # a value (text or a number), not a figure
            print(f"[{name}] {fig}")
        return
    myst_glue(name, fig, display=False)
