"""Migrate stored results (book/_data/*.json) to the current format, once, in place, and say
whether any run's outcome changes under the current `classify_outcome`.

Issue 19: the corpus fingerprint now covers the validation split as well as the files, so the
shipped corpus's fingerprint changed from 41f26a9ba5c8 (files only) to d7e124989c32 (files and
split 0.1). Every stored result was trained on the shipped corpus with the default split, so its
data is the same and only the recorded fingerprint changes; the migration is recorded in the
file's provenance. Run: python scripts/migrate_results.py book/_data/*.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import normlab
from normlab.results import load_results

OLD, NEW = "41f26a9ba5c8", normlab.load_corpus().fingerprint[:12]
NOTE = f"corpus_sha256 {OLD} -> {NEW}: the fingerprint now covers the split (0.1, the default used); same bytes"


def old_outcome(r: normlab.TrainResult) -> str:
    """classify_outcome before issue 19: a completed run was never diverged."""
    if r.status == "diverged":
        return "diverged"
    return "stalled" if r.final_val_loss > r.unigram_val - 0.1 else "trained"


def main(paths: list[str]) -> None:
    for name in paths:
        path = Path(name)
        payload = json.loads(path.read_text())
        if "results" not in payload:
            provenance = payload.get("provenance", {})
        else:
            provenance = payload["meta"].get("provenance", {})
        if provenance.get("corpus_sha256") == OLD:
            provenance["corpus_sha256"] = NEW
            provenance.setdefault("corpus_val_fraction", 0.1)
            provenance.setdefault("migrations", []).append(NOTE)
            text = json.dumps(payload, separators=(",", ":"), allow_nan=False) + "\n"
            if "results" not in payload:
                text = json.dumps(payload, indent=1) + "\n"
            path.write_text(text)
            print(f"{path}: migrated ({NOTE})")
        if "results" not in payload:
            continue
        results, _ = load_results(path)
        changed = [(i, old_outcome(r), normlab.classify_outcome(r)) for i, r in enumerate(results)
                   if old_outcome(r) != normlab.classify_outcome(r)]  # fmt: skip
        worst = max((r.evals[-1][1] for r in results if r.status != "diverged" and r.evals), default=math.nan)
        print(
            f"{path}: {len(results)} runs; outcomes changed under the current rule: {len(changed)} {changed[:5]}; "
            f"highest final validation loss of a completed run {worst:.3f} (ln 256 = {math.log(256):.3f})"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
