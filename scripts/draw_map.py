"""The map of the book's argument (book/images/map.svg): five steps from the block's identity path to depth,
each with the chapters that measure it. Run it after changing the text below; tests/test_map.py checks the
committed figure is what this script draws.

    python scripts/draw_map.py
"""

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "book" / "images" / "map.svg"
STEPS = (
    ("1. The identity path", "chapters 1-2",
     "Pre-LN adds each sub-layer to an untouched trunk: x reaches the top. "
     "Post-LN renormalises the trunk after every addition."),
    ("2. The gradient at init", "chapter 3",
     "A block's Jacobian: I + J_F J_LN (pre-LN) keeps an identity term; "
     "J_LN (I + J_F) (post-LN) passes every LayerNorm on the way down."),
    ("3. The first updates", "chapters 4-5",
     "Adam moves every weight by the rate: post-LN's output changes by its own size, "
     "its LayerNorm inputs grow, the lower blocks' gradient fades."),
    ("4. Warmup", "chapter 4",
     "A small rate in the first steps keeps those updates small: post-LN trains; pre-LN trains without it."),
    ("5. Depth", "chapters 4, 5, 9",
     "Deeper post-LN needs more warmup; DeepNorm's alpha and beta restore depth. "
     "Pre-LN's stream grows with depth: its cost."),
)  # fmt: skip
BEYOND = "Beyond the course (chapters 6-9): norms added inside the branch\n(sandwich, NormFormer), " \
         "inside attention (QK-norm), and every placement\non one benchmark (the leaderboard)."  # fmt: skip


def draw() -> plt.Figure:
    plt.rcParams["svg.hashsalt"] = "normlab-map"  # the same ids every run: the file only changes with its text
    n = len(STEPS)
    fig, ax = plt.subplots(figsize=(8.6, 8.4))
    ax.set_xlim(0, 1), ax.set_ylim(-0.9, n), ax.axis("off")
    for i, (title, where, body) in enumerate(STEPS):
        y = n - 1 - i  # top to bottom
        ax.add_patch(plt.Rectangle((0.0, y + 0.1), 1.0, 0.78, facecolor="#eef3fb", edgecolor="#3b6db3", lw=1.2))
        ax.text(0.03, y + 0.66, title, ha="left", va="center", fontsize=12, weight="bold")
        ax.text(0.03, y + 0.36, where, ha="left", va="center", fontsize=10, color="#3b6db3")
        ax.text(0.4, y + 0.49, textwrap.fill(body, 44, break_on_hyphens=False), ha="left", va="center",
                fontsize=10, linespacing=1.35)  # fmt: skip
        if i < n - 1:
            ax.annotate("", xy=(0.16, y + 0.0), xytext=(0.16, y + 0.12),
                        arrowprops=dict(arrowstyle="->", color="#3b6db3", lw=1.5))  # fmt: skip
    ax.text(0.5, -0.45, BEYOND, ha="center", va="center", fontsize=9.5, style="italic", color="#444444")
    return fig


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    draw().savefig(OUT, format="svg", bbox_inches="tight", metadata={"Date": None})
    print(f"wrote {OUT}")
