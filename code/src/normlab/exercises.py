"""Checkers for the chapters' numeric exercises: the reader's answer is verified by code.

A checker never shows the expected value; the (hidden) solution cell calls it with the answer
and asserts that it is accepted.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Union

__all__ = ["check_answer"]

Number = Union[float, int]


def check_answer(
    name: str,
    answer: Optional[Union[Number, Sequence[Number]]],
    expected: Union[Number, Sequence[Number]],
    *,
    rtol: float = 0.05,
    atol: float = 0.0,
) -> bool:
    """True when ``answer`` matches ``expected`` within ``rtol``/``atol`` (element-wise for sequences).

    ``None`` means "not answered yet" and returns False with a hint, so a fresh notebook runs.
    """
    if answer is None:
        print(f"Exercise {name}: write your answer in the cell above, then run this cell again.")
        return False
    got = list(answer) if isinstance(answer, (list, tuple)) else [answer]
    want = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    if len(got) != len(want):
        print(f"Exercise {name}: expected {len(want)} number(s), got {len(got)}.")
        return False
    ok = all(math.isclose(float(g), float(w), rel_tol=rtol, abs_tol=atol) for g, w in zip(got, want))
    print(f"Exercise {name}: " + ("correct." if ok else f"not yet (tolerance {rtol:.0%}); try again."))
    return ok
