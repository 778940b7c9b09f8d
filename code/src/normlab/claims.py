"""Claim checks: every quantitative statement a chapter makes is computed, then asserted here.

`check` shows the measured value, records it in the cell's output metadata (the book's claims
index is collected from there) and raises AssertionError when the claim does not hold (unless
NORMLAB_CLAIMS=record, which the pass-rate sweep sets).
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

__all__ = ["check", "CLAIM_METADATA_KEY", "KINDS", "MODE_VAR", "MODES", "SOURCES", "VERDICTS"]

CLAIM_METADATA_KEY = "normlab_claim"
# NORMLAB_CLAIMS=record: a claim that fails is shown and recorded but raises nothing, so one execution
# of a chapter measures every claim in it (scripts/claim_rates.py, the pass rates over seed bases).
MODE_VAR = "NORMLAB_CLAIMS"
MODES = ("assert", "record")
# The two texts the book accompanies, named as a reader knows them.
SOURCES = {
    "course notes": 'the course notes (session 6.10, "Pre-norm vs post-norm Transformer block")',
    "explainer": 'the explainer ("Pre-Norm vs Post-Norm")',
}
# What a check is: a measurement that could come out otherwise ("measured"), a fact true by
# construction that the cell shows numerically ("identity": a derivation or a parity check), or a
# citation checked against the bibliography ("cited"). Only the first is a finding; the claims
# index counts the three apart.
KINDS = ("measured", "identity", "cited")
VERDICTS = ("confirmed", "wrong", "imprecise", "overstated", "unsupported", "right in substance, wrong in detail")


def check(
    claim_id: str,
    statement: str,
    holds: bool,
    measured: str,
    *,
    source: Optional[str] = None,
    quote: Optional[str] = None,
    verdict: Optional[str] = None,
    kind: str = "measured",
    **values: Any,
) -> None:
    """Assert one claim. ``measured`` is the human-readable evidence ("slope 0.84 in [0.5, 1.5]");
    ``values`` are the raw numbers, kept in the notebook for the claims index.

    When the claim checks a sentence of one of the book's sources, pass ``source`` (a key of
    `SOURCES`), the sentence as ``quote`` and our ``verdict`` on it (one of `VERDICTS`): the
    page "The sources, checked" is generated from these records. ``kind`` is one of `KINDS`: pass
    "identity" for a statement true by construction and "cited" for one the bibliography carries.
    """
    from .scale import get_scale, seed_base

    mode = _mode()
    if (source, quote, verdict).count(None) not in (0, 3):
        raise ValueError("pass source, quote and verdict together, or none of them")
    if source is not None and source not in SOURCES:
        raise ValueError(f"unknown source {source!r}; valid choices: {', '.join(SOURCES)}")
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; valid choices: {', '.join(KINDS)}")
    if verdict is not None and verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}; valid choices: {', '.join(VERDICTS)}")
    holds = bool(holds)
    record = {"id": claim_id, "statement": statement, "measured": measured, "holds": holds,
              "scale": get_scale(), "seed_base": seed_base(), "kind": kind, "values": values}  # fmt: skip
    if source is not None:
        record.update(source=source, quote=quote, verdict=verdict)
    word = "claim" if kind == "measured" else kind
    text = f"[{word} {claim_id}] {'holds' if holds else 'FAILS'}: {statement} (measured: {measured})"
    # The anchor lets "The sources, checked" and the claims index link to this very output.
    anchor = f'<span id="claim-{claim_id}"></span>'
    noun = {"measured": "Claim", "identity": "Identity", "cited": "Citation"}[kind]
    verdict_line = f"✓ **{noun} holds:**" if holds else f"✗ **{noun} FAILS:**"
    markdown = f"{anchor}{verdict_line} {statement}  \n*Measured:* {measured}"
    if source is not None:
        markdown += f'  \n*Checks {SOURCES[source]}:* "{quote}" ({verdict})'

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
    if not holds and mode == "assert":
        raise AssertionError(text)


def _mode() -> str:
    mode = os.environ.get(MODE_VAR, "").strip() or "assert"
    if mode not in MODES:
        raise ValueError(f"{MODE_VAR}={mode!r} is not a mode; valid choices: {', '.join(MODES)}")
    return mode
