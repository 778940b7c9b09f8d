"""Stored sweeps replayed under a live check: a committed board loads in seconds, a few of its runs
are trained again and must reproduce it, and a board that does not match is trained live instead.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, Union

from .data import Corpus, load_corpus
from .record import TrainResult
from .results import encode_model, load_results, save_results
from .scale import get_scale
from .sweep import run_many
from .training import TrainConfig

__all__ = ["Replay", "replay_or_run", "stored_sweep", "save_sweep", "board_path", "mismatch", "loss_difference",
           "config_with_defaults"]  # fmt: skip

# A chapter's stored boards sit beside it: book/_data/<name>-<scale>.json (chapters run in book/).
BOARD_DIR = Path("_data")
# Set by a maintainer making the boards (scripts/make_boards.sh): train live and save there.
RESULTS_DIR_VAR = "NORMLAB_RESULTS_DIR"


@dataclass
class Replay:
    """What `replay_or_run` returns: the results, where they came from ("stored" or "live"), why,
    the check's (job index, stored final loss, fresh final loss) triples, and the stored metadata."""

    results: list[TrainResult]
    source: str
    why: str
    checked: list[tuple[int, float, float]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def largest_difference(self) -> float:
        """The largest |stored - fresh| final loss over the checked runs (0 when both diverged)."""
        return max((loss_difference(a, b) for _, a, b in self.checked), default=math.nan)


def loss_difference(stored: float, fresh: float) -> float:
    if math.isnan(stored) and math.isnan(fresh):
        return 0.0  # both diverged: the same outcome
    return abs(stored - fresh)


def mismatch(jobs: Sequence[tuple[dict[str, Any], TrainConfig]], stored: list[TrainResult]) -> str:
    """Why the stored runs are not these jobs ('' when they are, run for run, in order)."""
    if len(stored) != len(jobs):
        return f"it holds {len(stored)} runs, the sweep has {len(jobs)}"
    for i, ((model_kwargs, config), result) in enumerate(zip(jobs, stored)):
        if encode_model(model_kwargs) != encode_model(result.model):
            return f"run {i}'s model differs ({result.model} stored, {model_kwargs} now)"
        if _config_of(config, result.config) != result.config:
            now = _config_of(config, result.config)
            keys = sorted(k for k in set(now) | set(result.config) if now.get(k) != result.config.get(k))
            return f"run {i}'s training config differs in {', '.join(keys)}"
    return ""


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}


def config_with_defaults(stored: dict[str, Any]) -> dict[str, Any]:
    """A stored run's config with every TrainConfig field added after the run was stored filled in
    at its default: the run was trained under that default."""
    return {**_DEFAULTS, **stored}


def _config_of(config: TrainConfig, stored: dict[str, Any]) -> dict[str, Any]:
    """``config`` as a stored run's config reads: a field added to TrainConfig after the run was
    stored, at its default value, is left out (the converse of `config_with_defaults`)."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k in stored or v != _DEFAULTS[k]}


def _check_indices(check: Sequence[int], n: int) -> None:
    if not check:
        raise ValueError("check must name at least one job to train again (indices into jobs)")
    bad = [i for i in check if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n]
    if bad:
        raise ValueError(f"check indices must be in [0, {n}), got {bad}")


def replay_or_run(
    path: Union[str, Path],
    jobs: Sequence[tuple[dict[str, Any], TrainConfig]],
    check: Union[Sequence[int], Callable[[list[TrainResult]], Sequence[int]]],
    *,
    corpus: Corpus | None = None,
    tol: float = 0.02,
    **sweep: Any,
) -> Replay:
    """The results of ``jobs`` from the results file at ``path`` (`save_results`), if it holds exactly
    these runs in this order and the runs at indices ``check``, trained again now, end within ``tol``
    nats of their stored final validation loss (or diverge as they did); otherwise all of ``jobs``
    trained live, with the reason printed. ``check`` may be a function of the stored results that
    returns the indices (to check each contestant where it trains stably, say at its best rate).
    ``sweep`` goes to `run_many` (store, desc, workers, ...)."""
    corpus = corpus or load_corpus()
    path = Path(path)
    if not callable(check):
        _check_indices(check, len(jobs))
    if not path.exists():
        why = f"no stored results at {path}"
    else:
        try:
            stored, meta = load_results(path, corpus)
            why = mismatch(jobs, stored)
        except ValueError as error:
            why = str(error)
        if not why:
            check = check(list(stored)) if callable(check) else check
            _check_indices(check, len(jobs))
            fresh = run_many([jobs[i] for i in check], corpus=corpus, **sweep)
            checked = [(i, stored[i].final_val_loss, f.final_val_loss) for i, f in zip(check, fresh)]
            worst = max(loss_difference(a, b) for _, a, b in checked)
            if worst <= tol:
                note = f"{len(check)} of its {len(jobs)} runs trained again: largest difference {worst:.2g} nats"
                return Replay(list(stored), "stored", note, checked, meta)
            why = f"it does not reproduce: {len(check)} runs trained again differ by up to {worst:.3g} nats (> {tol:g})"
    print(f"normlab: {path.name}: {why}; training all {len(jobs)} runs live", file=sys.stderr)
    return Replay(run_many(jobs, corpus=corpus, **sweep), "live", why)


def board_path(name: str, scale: str | None = None) -> Path:
    """Where a chapter's stored board ``name`` for ``scale`` (default: the current one) lives."""
    return BOARD_DIR / f"{name}-{scale or get_scale()}.json"


def stored_sweep(
    name: str,
    jobs: Sequence[tuple[dict[str, Any], TrainConfig]],
    check: Union[Sequence[int], Callable[[list[TrainResult]], Sequence[int]]],
    *,
    corpus: Corpus | None = None,
    tol: float = 0.02,
    **sweep: Any,
) -> Replay:
    """A chapter's sweep: its stored board at this scale (`board_path`), replayed under the live
    check of `replay_or_run` when the board holds exactly these runs, else trained live, with the
    reason. With NORMLAB_RESULTS_DIR set (a maintainer making the boards) it always trains live."""
    desc = sweep.pop("desc", name)
    path = board_path(name)
    if not os.environ.get(RESULTS_DIR_VAR) and path.exists():
        return replay_or_run(path, jobs, check, corpus=corpus, tol=tol, desc=f"{desc}, checked", **sweep)
    if os.environ.get(RESULTS_DIR_VAR):
        why = f"trained now, to be stored ({RESULTS_DIR_VAR} is set)"
    else:
        why = f"trained now: no stored board for the {get_scale()} scale"
    return Replay(run_many(jobs, corpus=corpus, desc=desc, **sweep), "live", why)


def save_sweep(name: str, results: Sequence[TrainResult], meta: dict[str, Any]) -> Path | None:
    """Save ``results`` (with ``meta``: provenance and what the chapter needs to read them back) as
    the board ``name`` at this scale in NORMLAB_RESULTS_DIR, if set; returns the path, or None."""
    out = os.environ.get(RESULTS_DIR_VAR)
    if not out:
        return None
    path = Path(out) / board_path(name).name
    path.parent.mkdir(parents=True, exist_ok=True)
    save_results(path, list(results), meta)
    print(f"saved {path}")
    return path
