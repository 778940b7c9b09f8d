"""Chapter 9's stored boards, replayed: each round of a `normlab.board.Benchmark` loaded from its
file if it holds exactly the runs that round would train, with a few of them trained again to check it.

A board that fails the check (changed code, another seed base or scale) is trained live, every round,
or refused with a message that says how to make it again (`scripts/make_leaderboard.py`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from .board import Benchmark, Plan, Runs, rounds
from .data import Corpus, load_corpus
from .replay import board_path, loss_difference, mismatch
from .results import load_results
from .scale import get_scale
from .sweep import run_many

__all__ = ["Rounds", "Stored", "replay", "replay_rounds", "load_rounds"]


@dataclass
class Rounds:
    """What `replay_rounds` returns: each round's plan and runs, where they came from ("stored" or
    "live") and why, and the (board, job index, stored, fresh) final losses of the runs checked."""

    plans: list[Plan]
    runs: list[Runs]
    source: str
    why: str
    checked: list[tuple[str, int, float, float]] = field(default_factory=list)
    meta: list[dict[str, Any]] = field(default_factory=list)

    def all_runs(self) -> Runs:
        return {key: rs for runs in self.runs for key, rs in runs.items()}


def _load(bm: Benchmark, name: str, scale: str, corpus: Corpus, check: Optional[Callable] = None):
    """The stored rounds that hold exactly the runs their round would train, the runs ``check``
    names in them, and why loading stopped short ('' when every round loaded)."""
    plans, runs, stored, metas, jobs = [], [], [], [], []
    for k, make in enumerate(rounds(bm), 1):
        plan = make(runs)
        if not plan.entries:  # nothing to widen, say: a round with no runs has no board
            plans.append(plan), runs.append({}), stored.append([]), metas.append({})
            continue
        path = board_path(f"{name}-{k}", scale)
        if not path.exists():
            return plans, runs, stored, metas, jobs, f"no stored board at {path}"
        try:
            results, meta = load_results(path, corpus)
        except ValueError as error:
            return plans, runs, stored, metas, jobs, f"{path.name}: {error}"
        why = mismatch(plan.jobs(), results)
        if why:
            return plans, runs, stored, metas, jobs, f"{path.name}: {why}"
        plans.append(plan), runs.append(plan.collect(results)), stored.append(results), metas.append(meta)
        jobs += [(k, i, plan.jobs()[i]) for i in (check(k, plan, runs) if check else [])]
    return plans, runs, stored, metas, jobs, ""


def load_rounds(bm: Benchmark, name: str, scale: str, *, corpus: Optional[Corpus] = None) -> Rounds:
    """The stored rounds of ``bm`` as they are, with no run trained again (to show another scale's
    board beside this one's); a ValueError says why when they are not exactly ``bm``'s rounds."""
    plans, runs, _, metas, _, why = _load(bm, name, scale, corpus or load_corpus())
    if why:
        raise ValueError(f"the stored boards {name}-*-{scale}.json are not this benchmark's rounds: {why}")
    return Rounds(plans, runs, "stored", "loaded as stored, not checked", [], metas)


@dataclass(frozen=True)
class Stored:
    """A benchmark's stored boards, as `replay` takes them: ``<name>-<k>-<scale>.json`` (scale None:
    the current one), the runs ``check(k, plan, runs so far)`` names trained again, and whether a
    board that cannot be used is trained live (else a ValueError says how to make it again)."""

    bm: Benchmark
    name: str
    check: Callable[[int, Plan, list[Runs]], Sequence[int]]
    scale: Optional[str] = None
    train_if_stale: bool = True


def replay(boards: Sequence[Stored], *, corpus: Optional[Corpus] = None, tol: float = 0.02,
           **sweep: Any) -> list[Rounds]:  # fmt: skip
    """The rounds of each of ``boards`` from their stored files, if each holds exactly the runs its
    round would train given the rounds before it, and the runs its check names in every round,
    trained again now (those of every board in one sweep, so they share the workers), end within
    ``tol`` nats of their stored final loss (or diverge as they did). All rounds of a board share one
    code, so a round may name none when another is checked. A board that fails is trained live,
    every round (or, with ``train_if_stale=False``, a ValueError says how to make it again)."""
    corpus = corpus or load_corpus()
    loaded = [_load(b.bm, b.name, b.scale or get_scale(), corpus, b.check) for b in boards]
    for b, (*_, jobs, why) in zip(boards, loaded):
        if not why and not jobs:
            raise ValueError(f"{b.name}: check named no run in any round: at least one must be trained again")
    todo = [job for *_, jobs, why in loaded if not why for _, _, job in jobs]
    fresh = iter(run_many(todo, corpus=corpus, **sweep) if todo else [])
    out = []
    for b, (plans, runs, stored, metas, jobs, why) in zip(boards, loaded):
        scale = b.scale or get_scale()
        if not why:
            checked = [(f"{b.name}-{k}", i, stored[k - 1][i].final_val_loss, next(fresh).final_val_loss)
                       for k, i, _ in jobs]  # fmt: skip
            worst = max(loss_difference(x, y) for *_, x, y in checked)
            if worst <= tol:
                n = sum(map(len, stored))
                note = f"{len(jobs)} of their {n} runs trained again: largest difference {worst:.2g} nats"
                out.append(Rounds(plans, runs, "stored", note, checked, metas))
                continue
            why = f"they do not reproduce: {len(jobs)} runs trained again differ by up to {worst:.3g} nats (> {tol:g})"
        if not b.train_if_stale:
            raise ValueError(f"the stored boards {b.name}-*-{scale}.json cannot be used: {why}; make them again "
                             "with scripts/make_leaderboard.py (see its docstring)")  # fmt: skip
        print(f"normlab: {b.name}: {why}; training every round live", file=sys.stderr)
        plans, runs = [], []
        for make in rounds(b.bm):
            plan = make(runs)
            results = run_many(plan.jobs(), corpus=corpus, **sweep) if plan.entries else []
            plans.append(plan), runs.append(plan.collect(results))
        out.append(Rounds(plans, runs, "live", why))
    return out


def replay_rounds(bm: Benchmark, name: str, check: Callable[[int, Plan, list[Runs]], Sequence[int]], *,
                  scale: Optional[str] = None, train_if_stale: bool = True, **kwargs: Any) -> Rounds:  # fmt: skip
    """`replay` of one benchmark's stored boards."""
    return replay([Stored(bm, name, check, scale, train_if_stale)], **kwargs)[0]
