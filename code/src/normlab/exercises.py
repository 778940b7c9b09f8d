"""Checkers for the chapters' numeric exercises: the reader's answer is verified by code.

A checker never shows the expected value; the (hidden) solution cell calls it with the answer
and asserts that it is accepted.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Union

__all__ = ["check_answer"]

Number = Union[float, int]


def _numbers(value: Any) -> list[float]:
    """A number, a list or tuple of numbers, or a numpy array or torch tensor of them, as floats."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()  # numpy arrays and scalars, torch tensors
    if isinstance(value, (list, tuple)):
        return [number for item in value for number in _numbers(item)]
    if isinstance(value, (str, bytes)) or isinstance(value, bool):
        raise TypeError(f"not a number: {value!r}")
    return [float(value)]


def check_answer(
    name: str,
    answer: Optional[Union[Number, Sequence[Number]]],
    expected: Union[Number, Sequence[Number]],
    *,
    rtol: float = 0.05,
    atol: float = 0.0,
) -> bool:
    """True when ``answer`` matches ``expected`` within ``rtol``/``atol`` (element-wise for sequences;
    a numpy array or a torch tensor counts as its numbers).

    ``None`` means "not answered yet" and returns False with a hint, so a fresh notebook runs.
    """
    if answer is None:
        print(f"Exercise {name}: write your answer in the cell above, then run this cell again.")
        return False
    try:
        got, want = _numbers(answer), _numbers(expected)
    except (TypeError, ValueError):
        print(f"Exercise {name}: the answer must be a number or a list of numbers, got {answer!r}.")
        return False
    if len(got) != len(want):
        print(f"Exercise {name}: expected {len(want)} number(s), got {len(got)}.")
        return False
    ok = all(math.isclose(float(g), float(w), rel_tol=rtol, abs_tol=atol) for g, w in zip(got, want))
    print(f"Exercise {name}: " + ("correct." if ok else f"not yet (tolerance {rtol:.0%}); try again."))
    return ok
