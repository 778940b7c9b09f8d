"""Chapter 9's stored boards, replayed: each round of a `normlab.board.Benchmark` loaded from its
file if it holds exactly the runs that round would train, and checked by `normlab.replay`'s early check.

The rule is `normlab.replay`'s (`confirm`, `verdict`, NORMLAB_BOARDS); a board of other runs (another seed
base or scale) is trained live, every round, or refused with how to make it again (`make_leaderboard.py`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from .board import Benchmark, Plan, Runs, rounds
from .data import Corpus, load_corpus
from .replay import BOARD_SCALE, MODE_VAR, Check, board_path, confirm, mismatch, mode, verdict
from .results import load_results
from .scale import get_scale
from .sweep import run_many

__all__ = ["Rounds", "Stored", "replay", "replay_rounds", "load_rounds"]


@dataclass
class Rounds:
    """What `replay_rounds` returns: each round's plan and runs, where they came from ("stored",
    "unconfirmed" or "live") and why, and the (board, job index, relative difference) of the early check."""

    plans: list[Plan]
    runs: list[Runs]
    source: str
    why: str
    checked: list[tuple[str, int, float]] = field(default_factory=list)
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
    """A benchmark's stored boards, as `replay` takes them: ``<name>-<k>-<scale>.json.xz`` (scale None:
    this page's board scale, `normlab.replay.BOARD_SCALE`), the runs ``check(k, plan, runs so far)``
    names trained again for their early check, and whether NORMLAB_BOARDS=live may train them here (the
    long budget's hours never are)."""

    bm: Benchmark
    name: str
    check: Callable[[int, Plan, list[Runs]], Sequence[int]]
    scale: Optional[str] = None
    train_if_stale: bool = True


def _live(bm: Benchmark, corpus: Corpus, sweep: dict[str, Any]) -> tuple[list[Plan], list[Runs]]:
    plans, runs = [], []
    for make in rounds(bm):
        plan = make(runs)
        results = run_many(plan.jobs(), corpus=corpus, **sweep) if plan.entries else []
        plans.append(plan), runs.append(plan.collect(results))
    return plans, runs


def replay(boards: Sequence[Stored], *, corpus: Optional[Corpus] = None, **sweep: Any) -> list[Rounds]:
    """The rounds of each of ``boards`` from their stored files, if each holds exactly the runs its
    round would train given the rounds before it, under `normlab.replay`'s rule: the runs its check
    names in every round are trained again for their early check (`confirm`). A board that holds other
    runs (another seed base, changed numbers), or NORMLAB_BOARDS=live, trains every round live, except a
    board with ``train_if_stale=False``: it is shown as stored (and checked) under NORMLAB_BOARDS=live,
    and one that holds other runs is a ValueError saying how to make it again."""
    corpus = corpus or load_corpus()
    return [_replay_one(b, corpus, sweep) for b in boards]


def _replay_one(b: Stored, corpus: Corpus, sweep: dict[str, Any]) -> Rounds:
    scale = b.scale or BOARD_SCALE[get_scale()]
    plans, runs, stored, metas, jobs, why = _load(b.bm, b.name, scale, corpus, b.check)
    if not why and not jobs:
        raise ValueError(f"{b.name}: check named no run in any round: at least one must be trained again")
    if not why and (mode() != "live" or not b.train_if_stale):
        checks = [(k, confirm(metas[k - 1], plans[k - 1].jobs(), [i for kk, i, _ in jobs if kk == k], corpus))
                  for k in sorted({k for k, _, _ in jobs})]  # fmt: skip
        missing = "; ".join(f"{b.name}-{k}: {c.missing}" for k, c in checks if c.missing)
        merged = Check(missing=missing) if missing else Check([(i, d) for _, c in checks for i, d in c.differences])
        source, sentence = verdict(f"{b.name}-*-{scale}", merged, sum(map(len, stored)))
        checked = [(f"{b.name}-{k}", i, d) for k, c in checks for i, d in c.differences]
        return Rounds(plans, runs, source, sentence, checked, metas)
    why = why or f"trained here, as {MODE_VAR}=live asks"
    if not b.train_if_stale:
        raise ValueError(f"the stored boards {b.name}-*-{scale} cannot be used: {why}; make them again "
                         "with scripts/make_leaderboard.py (see its docstring)")  # fmt: skip
    print(f"normlab: {b.name}: {why}; training every round live", file=sys.stderr)
    return Rounds(*_live(b.bm, corpus, sweep), "live", why)


def replay_rounds(bm: Benchmark, name: str, check: Callable[[int, Plan, list[Runs]], Sequence[int]], *,
                  scale: Optional[str] = None, train_if_stale: bool = True, **kwargs: Any) -> Rounds:  # fmt: skip
    """`replay` of one benchmark's stored boards."""
    return replay([Stored(bm, name, check, scale, train_if_stale)], **kwargs)[0]
