"""Argument checks shared by the package: each names the argument, the valid range or choices, and
what it was given, so bad input fails at once with a ValueError instead of deep inside torch.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

__all__ = ["integer", "number", "flag", "choice"]


def integer(name: str, value: Any, *, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``; a bool, a float such as 2.5 or a string is an error."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def number(
    name: str,
    value: Any,
    *,
    low: Optional[float] = None,
    high: Optional[float] = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float in the interval [low, high] (open at an end with ``*_open``);
    a bool or a string ("1e-3") is an error, not a number."""
    left = "(" if low_open or low is None else "["
    right = ")" if high_open or high is None else "]"
    lo = "-inf" if low is None else f"{low:g}"
    hi = "inf" if high is None else f"{high:g}"
    valid = f"a finite number in {left}{lo}, {hi}{right}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be {valid}, got {value!r} ({type(value).__name__})")
    v = float(value)
    ok = math.isfinite(v)
    if ok and low is not None:
        ok = v > low if low_open else v >= low
    if ok and high is not None:
        ok = v < high if high_open else v <= high
    if not ok:
        raise ValueError(f"{name} must be {valid}, got {value!r}")
    return v


def flag(name: str, value: Any) -> bool:
    """``value`` as a bool: True or False only ("yes", 1 and None are errors)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return value


def choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices`` (exactly: no case folding, no stripping)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"unknown {name} {value!r}; valid choices: {', '.join(choices)}")
    return value
