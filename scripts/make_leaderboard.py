"""Chapter 9's stored boards, made again: the four rounds of `normlab.board` at a scale (and, with
--long, the long budget `normlab.board.LONG`), trained with `run_many` on one worker per core, each
round saved with its provenance and its runs' early fingerprints (`normlab.replay.early_meta`) as
leaderboard-<round>-<scale>.json.xz among the boards that ship inside normlab (code/src/normlab/boards/;
the long budget as leaderboard-long-<round>-cpu.json.xz). Run it from a clean checkout, one torch thread
per process:

    OMP_NUM_THREADS=1 python scripts/make_leaderboard.py --scale cpu --long --store /tmp/board-store

--store makes it resumable: every finished run is kept there, and a rerun loads it. A round whose
board is already in --out with exactly that round's runs is kept as it is, so rounds committed by an
earlier session resume on another machine. With --reuse, a run that a board already in --out holds
(the same model and training config, run for run) is taken from it instead of trained again: only
sound when normlab's training code has not changed since that board was made (compare the
``normlab_source`` of its provenance, or the git log of code/src), and checked by the early check of
--verify of the reused runs (`normlab.replay.confirm`); each round's metadata names the boards it reused
runs from, and a reused run keeps the fingerprint its board stored.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import normlab
from normlab import board
from normlab.replay import TOLERANCE, board_path, config_with_defaults, early_meta, fingerprint, mismatch
from normlab.results import encode_model, load_results, provenance, save_results


def _kept(path: Path, plan: board.Plan, corpus):
    """The results stored at ``path`` if they are exactly ``plan``'s runs, else None."""
    if not path.exists():
        return None
    try:
        results, _ = load_results(path, corpus)
    except ValueError:
        return None
    return None if mismatch(plan.jobs(), results) else results


def _key(model: dict, config: dict) -> str:
    """One run's identity: its model and its training config (a field added to TrainConfig after a
    run was stored reads as its default, as `normlab.replay.mismatch` reads it)."""
    return json.dumps([encode_model(model), config_with_defaults(config)], sort_keys=True, default=str)


def _reusable(out: Path, prefix: str, scale: str, corpus) -> dict[str, tuple[object, str, list]]:
    """Every run of the boards ``<prefix>-<k>-<scale>.json.xz`` in ``out``, by `_key`, with its board's
    name and revision and its early fingerprint (read before any round is written again)."""
    found = {}
    for path in sorted(out.glob(f"{prefix}-[0-9]-{scale}.json.xz")):
        results, meta = load_results(path, corpus)
        made = f"{path.name} (made at {meta.get('provenance', {}).get('revision', '?')})"
        fps = meta.get("early", {}).get("fingerprints") or [None] * len(results)
        found.update({_key(r.model, r.config): (r, made, fp) for r, fp in zip(results, fps)})
    return found


def make(bm: board.Benchmark, scale: str, prefix: str, store: str | None, out: Path, corpus, reuse: bool,
         verify: int) -> None:  # fmt: skip
    command = " ".join([f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')}", "python", *sys.argv])
    os.environ["NORMLAB_SCALE"] = scale  # the provenance names the scale the runs were made at
    old = _reusable(out, prefix, scale, corpus) if reuse else {}
    rounds: list = []
    for k, make_plan in enumerate(board.rounds(bm), 1):
        plan = make_plan(rounds)
        start = time.time()
        path = out / f"{prefix}-{k}-{scale}.json.xz"
        if not plan.entries:  # an empty round (nothing to widen) has no board
            path.unlink(missing_ok=True)
            print(f"make_leaderboard: round {k} at {scale} has no runs", flush=True)
            rounds.append({})
            continue
        kept = _kept(path, plan, corpus)
        if kept is not None:  # a round already made (say, committed by an earlier session) is kept
            print(f"make_leaderboard: {path.name}: kept, it holds exactly this round's runs", flush=True)
            rounds.append(plan.collect(kept))
            continue
        jobs = plan.jobs()
        hits = [old.get(_key(m, dataclasses.asdict(c))) for m, c in jobs]
        hits = [h if h is None or h[2] is not None else None for h in hits]  # no fingerprint: train it
        todo = [i for i, h in enumerate(hits) if h is None]
        again = [i for i, h in enumerate(hits) if h is not None][:: max(1, sum(h is not None for h in hits) // verify)][
            :verify] if verify else []  # fmt: skip
        for i in again:
            now, was = fingerprint(*jobs[i], corpus), hits[i][2]
            if max(abs(a - b) / abs(b) for a, b in zip(now, was)) > TOLERANCE or len(now) != len(was):
                sys.exit(f"make_leaderboard: reused run {i} of round {k} fails its early check: normlab's training "
                         "changed since its board was made; run without --reuse")  # fmt: skip
        fresh = normlab.run_many([jobs[i] for i in todo], corpus=corpus, store=store, desc=f"{prefix}-{k} at {scale}")
        results = [h[0] if h else None for h in hits]
        fingerprints = [h[2] if h else None for h in hits]
        for i, r, fp in zip(todo, fresh, early_meta(fresh, corpus)["fingerprints"]):
            results[i], fingerprints[i] = r, fp
        reused = sorted({h[1] for h in hits if h})
        meta = {"provenance": provenance(corpus), "benchmark": dataclasses.asdict(bm), "round": k, "command": command,
                "reused": {"runs": len(jobs) - len(todo), "from": reused, "verified": len(again)},
                "early": {**early_meta([], corpus), "fingerprints": fingerprints}}  # fmt: skip
        save_results(path, results, meta)
        print(f"make_leaderboard: {path.name}: {len(results)} runs ({len(todo)} trained, {len(jobs) - len(todo)} "
              f"reused, {len(again)} of them verified), {time.time() - start:.0f} s", flush=True)  # fmt: skip
        rounds.append(plan.collect(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=normlab.SCALES, help="the scale's four rounds (leave out for --long only)")
    parser.add_argument("--long", action="store_true", help="also the long budget, normlab.board.LONG")
    parser.add_argument("--store", help="a directory that keeps finished runs, so a rerun resumes")
    parser.add_argument("--out", type=Path, default=board_path("leaderboard", "cpu").parent)
    parser.add_argument("--reuse", action="store_true", help="take runs the boards in --out already hold")
    parser.add_argument("--verify", type=int, default=4, help="reused runs per round given the early check")
    args = parser.parse_args()
    if not args.scale and not args.long:
        parser.error("nothing to make: give --scale and/or --long")
    corpus = normlab.load_corpus()
    if normlab.seed_base() != 0:
        sys.exit("make_leaderboard: the stored boards are for seed base 0; unset NORMLAB_SEED_BASE")
    if args.long:
        make(board.LONG, "cpu", "leaderboard-long", args.store, args.out, corpus, args.reuse, args.verify)
    if args.scale:
        make(
            board.SIZES.get(args.scale),
            args.scale,
            "leaderboard",
            args.store,
            args.out,
            corpus,
            args.reuse,
            args.verify,
        )


if __name__ == "__main__":
    main()
