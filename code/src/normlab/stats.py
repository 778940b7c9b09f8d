"""Small statistics the chapters assert with: rank correlation and log-log slopes, in NumPy."""

from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["spearman", "loglog_slope", "geometric_mean"]


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


def geometric_mean(a: np.ndarray, axis: int = 0) -> np.ndarray:
    """Geometric mean: the average for quantities (like gradient norms) that vary by factors."""
    return np.exp(np.log(np.asarray(a, dtype=float)).mean(axis))
