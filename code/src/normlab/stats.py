"""Small statistics the chapters assert with: rank correlation, log-log slopes, paired seed
differences and Wortsman et al.'s learning-rate sensitivity, in NumPy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

__all__ = [
    "spearman", "loglog_slope", "row_slopes", "geometric_mean", "lr_sensitivity_terms", "lr_sensitivity",
    "median_loss", "Paired", "paired_difference", "one_sample", "t_critical95",
]  # fmt: skip


def _ranks(a: np.ndarray) -> np.ndarray:
    """Ranks 0 .. n-1, tied values sharing the average of their ranks."""
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(len(a), dtype=float)
    _, inverse = np.unique(a, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / np.bincount(inverse)[inverse]


def spearman(y: np.ndarray, x: Optional[np.ndarray] = None) -> float:
    """Spearman rank correlation of ``y`` with ``x`` (default: its index 0, 1, 2, ...): the Pearson
    correlation of the ranks, ties given their average rank. NaN for a constant sequence (no ranking
    to correlate); a NaN in the input is refused."""
    y = np.asarray(y, dtype=float).ravel()
    x = np.arange(len(y), dtype=float) if x is None else np.asarray(x, dtype=float).ravel()
    if len(x) != len(y) or len(y) < 2:
        raise ValueError(f"need two sequences of equal length >= 2, got {len(y)} and {len(x)}")
    if np.isnan(y).any() or np.isnan(x).any():
        raise ValueError("spearman: the input contains NaN; drop or mark those entries first")
    ry, rx = _ranks(y), _ranks(x)
    if ry.std() == 0 or rx.std() == 0:
        return float("nan")
    return float(np.corrcoef(ry, rx)[0, 1])


def loglog_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log y against log x: the exponent p in y ~ x^p."""
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


def row_slopes(x: Sequence[float], rows: np.ndarray) -> np.ndarray:
    """The least-squares slope of each row of ``rows`` against ``x`` (one per seed, to average with
    `one_sample` or pair): NaN for a row with a non-finite value, or with fewer than two points."""
    x, rows = np.asarray(x, dtype=float), np.atleast_2d(np.asarray(rows, dtype=float))
    if rows.shape[1] != x.size:
        raise ValueError(f"row_slopes: each row needs one value per x ({x.size}), got rows of {rows.shape[1]}")
    ok = np.isfinite(rows).all(1) & (x.size >= 2)
    out = np.full(len(rows), np.nan)
    if ok.any():
        out[ok] = np.polyfit(x, rows[ok].T, 1)[0]
    return out


def geometric_mean(a: np.ndarray, axis: int = 0) -> np.ndarray:
    """Geometric mean: the average for quantities (like gradient norms) that vary by factors."""
    return np.exp(np.log(np.asarray(a, dtype=float)).mean(axis))


def lr_sensitivity_terms(final_losses: Sequence[float], initial_loss: float) -> np.ndarray:
    """The terms of Wortsman et al.'s LR sensitivity (arXiv 2309.14322), one per learning rate of a
    sweep, for one seed: min(l(lr), l0) - min over the grid of the same, with l0 the loss at
    initialisation. A diverged run (NaN) counts as l0. Their mean is `lr_sensitivity`."""
    capped = np.asarray(final_losses, dtype=float)
    if capped.ndim != 1 or len(capped) < 1:
        raise ValueError(f"need one final loss per learning rate (a 1-d sequence), got shape {capped.shape}")
    if not np.isfinite(initial_loss):
        raise ValueError(f"the loss at initialisation must be finite, got {initial_loss!r}")
    capped = np.minimum(np.nan_to_num(capped, nan=initial_loss, posinf=initial_loss), initial_loss)
    return capped - capped.min()


def lr_sensitivity(final_losses: Sequence[float], initial_loss: float) -> float:
    """Wortsman et al.'s LR sensitivity (2023, "Small-scale proxies for large-scale Transformer training
    instabilities", arXiv 2309.14322): E over the grid of [min(l(lr), l0) - min_lr l(lr)], how far the
    final loss is, on average over the sweep's rates, from the sweep's best. 0 when every rate reaches
    the best loss; relative to the model's own best, so read it next to that best."""
    return float(lr_sensitivity_terms(final_losses, initial_loss).mean())


def median_loss(final_losses: Sequence[float]) -> float:
    """The median over seeds of final losses, a diverged run (NaN, as `TrainResult.final_val_loss`
    gives it) counted as worse than any finished one: a rate where most runs diverge cannot look
    best, and one where all diverge is +inf."""
    values = np.asarray(final_losses, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"need a non-empty 1-d sequence of final losses, got shape {values.shape}")
    return float(np.median(np.where(np.isfinite(values), values, np.inf)))


_T95 = (
    12.71,
    4.30,
    3.18,
    2.78,
    2.57,
    2.45,
    2.36,
    2.31,
    2.26,
    2.23,
    2.20,
    2.18,
    2.16,
    2.14,
    2.13,
    2.12,
    2.11,
    2.10,
    2.09,
    2.09,
)  # Student's t, two-sided 95%, 1..20 degrees of freedom


def t_critical95(df: int) -> float:
    """Student's t quantile for a two-sided 95% interval with ``df`` degrees of freedom (nan below
    1; 1.96 above the table's 20, a slight understatement there)."""
    if df < 1:
        return float("nan")
    return _T95[df - 1] if df <= len(_T95) else 1.96


@dataclass(frozen=True)
class Paired:
    """Seed-by-seed differences a - b (``diffs``, the pairs where both are finite), their ``mean``
    and its standard error ``se`` (sample SD / sqrt n; nan under two pairs); ``dropped`` counts the
    pairs left out because a value is not finite (a run diverged, or a stall was masked as NaN)."""

    diffs: np.ndarray
    mean: float
    se: float
    dropped: int

    @property
    def resolved(self) -> bool:
        """The mean difference is beyond seed noise: its two-sided 95% t interval (`interval95`)
        excludes 0 (False under two pairs). On 3 seeds that takes 4.30 standard errors, not 2."""
        lo, hi = self.interval95()
        return bool(lo > 0 or hi < 0)

    def interval95(self) -> tuple[float, float]:
        """The two-sided 95% t interval of the mean difference (Student's t with n - 1 degrees of
        freedom: 4.30 SE on 3 seeds, where a plain 2 SE would be only an ~80% interval)."""
        return (self.mean - t_critical95(self.diffs.size - 1) * self.se,
                self.mean + t_critical95(self.diffs.size - 1) * self.se)  # fmt: skip

    def interval_text(self, digits: int = 3) -> str:
        """The mean and its 95% interval, as the chapters print a gap: "+0.112 (+0.105, +0.119)";
        under two pairs there is no interval, and the text says so instead of printing nan."""
        if self.diffs.size < 2:
            return "no pair" if self.diffs.size == 0 else f"{self.mean:+.{digits}f} (one pair: no interval)"
        lo, hi = self.interval95()
        return f"{self.mean:+.{digits}f} ({lo:+.{digits}f}, {hi:+.{digits}f})"

    def describe(self, digits: int = 3) -> str:
        """E.g. "+0.036 +- 0.012 (SE, 5 seeds; per seed +0.021 .. +0.052)"."""
        if self.diffs.size == 0:
            return "no pair without a diverged run"
        lo, hi = self.diffs.min(), self.diffs.max()
        spread = f"+- {self.se:.{digits}f} (SE, " if self.diffs.size > 1 else "(no SE: "
        extra = f", {self.dropped} pair(s) with a stalled or diverged run (no value) left out" if self.dropped else ""
        return (f"{self.mean:+.{digits}f} {spread}{self.diffs.size} seed{'s' if self.diffs.size > 1 else ''}; per seed "
                f"{lo:+.{digits}f} .. {hi:+.{digits}f}{extra})")  # fmt: skip


def paired_difference(a: Sequence[float], b: Sequence[float]) -> Paired:
    """a - b paired by seed (a[i] and b[i] ran with the same seed): the noise a comparison of two
    placements carries is the spread of these differences, not the pooled spread of the runs."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired_difference needs two 1-d sequences of one length, got {a.shape} and {b.shape}")
    keep = np.isfinite(a) & np.isfinite(b)
    d = a[keep] - b[keep]
    se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("nan")
    return Paired(d, float(d.mean()) if d.size else float("nan"), se, int((~keep).sum()))


def one_sample(values: Sequence[float]) -> Paired:
    """Per-seed values (a slope each, say) against 0: their mean, its standard error and 95% t
    interval, as a `Paired` whose differences are the values themselves (non-finite ones dropped)."""
    values = np.asarray(values, dtype=float)
    return paired_difference(values, np.zeros_like(values))
