"""Claim checks: every quantitative statement a chapter makes is computed, then asserted here.

`check` shows the measured value, records it in the cell's output metadata (the book's claims
index is collected from there) and raises AssertionError when the claim does not hold.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["check", "CLAIM_METADATA_KEY"]

CLAIM_METADATA_KEY = "normlab_claim"


def check(claim_id: str, statement: str, holds: bool, measured: str, **values: Any) -> None:
    """Assert one claim. ``measured`` is the human-readable evidence ("slope 0.84 in [0.5, 1.5]");
    ``values`` are the raw numbers, kept in the notebook for the claims index."""
    from .scale import get_scale

    holds = bool(holds)
    record = {"id": claim_id, "statement": statement, "measured": measured, "holds": holds,
              "scale": get_scale(), "values": values}  # fmt: skip
    text = f"[claim {claim_id}] {'holds' if holds else 'FAILS'}: {statement} (measured: {measured})"
    markdown = f"{'✓ **Claim holds:**' if holds else '✗ **Claim FAILS:**'} {statement}  \n*Measured:* {measured}"
    try:
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            meta = {CLAIM_METADATA_KEY: json.loads(json.dumps(record, default=float))}
            display({"text/plain": text, "text/markdown": markdown}, raw=True, metadata=meta)
        else:
            print(text)
    except ImportError:
        print(text)
    if not holds:
        raise AssertionError(text)
