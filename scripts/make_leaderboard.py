"""Chapter 9's stored boards, made again: the three rounds of `normlab.board` at a scale (and, with
--long, the long budget `normlab.board.LONG`), trained with `run_many` on one worker per core, each
round saved with its provenance as book/_data/leaderboard-<round>-<scale>.json (the long budget as
leaderboard-long-<round>-cpu.json). Run it from a clean checkout, one torch thread per process:

    OMP_NUM_THREADS=1 python scripts/make_leaderboard.py --scale cpu --long --store /tmp/board-store

--store makes it resumable: every finished run is kept there, and a rerun loads it. A round whose
board is already in --out with exactly that round's runs is kept as it is, so rounds committed by an
earlier session resume on another machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import normlab
from normlab import board
from normlab.replay import mismatch
from normlab.results import load_results, provenance, save_results

ROOT = Path(__file__).resolve().parent.parent


def _kept(path: Path, plan: board.Plan, corpus):
    """The results stored at ``path`` if they are exactly ``plan``'s runs, else None."""
    if not path.exists():
        return None
    try:
        results, _ = load_results(path, corpus)
    except ValueError:
        return None
    return None if mismatch(plan.jobs(), results) else results


def make(bm: board.Benchmark, scale: str, prefix: str, store: str | None, out: Path, corpus) -> None:
    command = " ".join([f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')}", "python", *sys.argv])
    os.environ["NORMLAB_SCALE"] = scale  # the provenance names the scale the runs were made at
    rounds: list = []
    plan = board.round1(bm)
    for k in (1, 2, 3):
        if not plan.entries:
            break
        start = time.time()
        path = out / f"{prefix}-{k}-{scale}.json"
        kept = _kept(path, plan, corpus)
        if kept is not None:  # a round already made (say, committed by an earlier session) is kept
            print(f"make_leaderboard: {path.name}: kept, it holds exactly this round's runs", flush=True)
            rounds.append(plan.collect(kept))
            plan = board.round2(bm, rounds[0]) if k == 1 else board.round3(bm, rounds[0], rounds[1])
            continue
        results = normlab.run_many(plan.jobs(), corpus=corpus, store=store, desc=f"{prefix}-{k} at {scale}")
        save_results(path, results, {"provenance": provenance(corpus), "benchmark": dataclasses.asdict(bm),
                                     "round": k, "command": command})  # fmt: skip
        print(f"make_leaderboard: {path.name}: {len(results)} runs, {time.time() - start:.0f} s", flush=True)
        rounds.append(plan.collect(results))
        plan = board.round2(bm, rounds[0]) if k == 1 else board.round3(bm, rounds[0], rounds[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=normlab.SCALES, help="the scale's three rounds (leave out for --long only)")
    parser.add_argument("--long", action="store_true", help="also the long budget, normlab.board.LONG")
    parser.add_argument("--store", help="a directory that keeps finished runs, so a rerun resumes")
    parser.add_argument("--out", type=Path, default=ROOT / "book" / "_data")
    args = parser.parse_args()
    if not args.scale and not args.long:
        parser.error("nothing to make: give --scale and/or --long")
    corpus = normlab.load_corpus()
    if normlab.seed_base() != 0:
        sys.exit("make_leaderboard: the stored boards are for seed base 0; unset NORMLAB_SEED_BASE")
    if args.long:
        make(board.LONG, "cpu", "leaderboard-long", args.store, args.out, corpus)
    if args.scale:
        make(board.SIZES.get(args.scale), args.scale, "leaderboard", args.store, args.out, corpus)


if __name__ == "__main__":
    main()
