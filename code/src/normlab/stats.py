"""Small statistics the chapters assert with: rank correlation and log-log slopes, in NumPy."""

from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["spearman", "loglog_slope", "geometric_mean"]


def spearman(y: np.ndarray, x: Optional[np.ndarray] = None) -> float:
    """Spearman rank correlation of ``y`` with ``x`` (default: its index 0, 1, 2, ...); no ties assumed."""
    y = np.asarray(y, dtype=float)
    x = np.arange(len(y), dtype=float) if x is None else np.asarray(x, dtype=float)
    ry, rx = np.argsort(np.argsort(y)), np.argsort(np.argsort(x))
    return float(np.corrcoef(ry, rx)[0, 1])


def loglog_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log y against log x: the exponent p in y ~ x^p."""
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


def geometric_mean(a: np.ndarray, axis: int = 0) -> np.ndarray:
    """Geometric mean: the average for quantities (like gradient norms) that vary by factors."""
    return np.exp(np.log(np.asarray(a, dtype=float)).mean(axis))
