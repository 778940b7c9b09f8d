"""Stored sweeps that travel: a chapter's board ships inside normlab (``boards/``, xz-compressed) and is
confirmed by the float64 first steps of a few of its runs, which rounding cannot move and a code change does.

Every chapter with a stored board (4 to 9) goes through `confirm` and `NORMLAB_BOARDS` (`mode`):
``stored`` (the default) shows a board that holds exactly the sweep's runs, confirmed, or labelled as
not confirmed when its check fails, and never trains it by surprise; ``live`` trains every sweep here,
when a reader asks; ``strict`` (the tests) raises when a board is not confirmed, so a change to the
code that made it cannot land without the boards made again (``scripts/make_boards.sh``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import torch

from .data import Corpus, load_corpus
from .record import TrainResult
from .results import encode_model, load_results, save_results
from .scale import get_scale
from .sweep import run_many
from .training import TrainConfig, run

__all__ = ["Replay", "Check", "replay_or_run", "stored_sweep", "save_sweep", "board_path", "mismatch", "mode",
           "verdict", "fingerprint", "early_meta", "confirm", "job_of", "config_with_defaults", "EARLY_STEPS",
           "TOLERANCE"]  # fmt: skip

MODE_VAR = "NORMLAB_BOARDS"
MODES = ("stored", "live", "strict")
# Set by a maintainer making the boards (scripts/make_boards.sh): train live and save there.
RESULTS_DIR_VAR = "NORMLAB_RESULTS_DIR"
# The check: a run's loss at initialisation on EARLY_WINDOWS validation windows, then its training loss at
# each of its first EARLY_STEPS steps, computed in float64 on the CPU. Measured on 163 runs of every board
# (scripts/board_spread.py, book/_data/board-spread.json): ATen's default, AVX2 and AVX-512 kernels (MKL
# and oneDNN limited to match), two torch threads, and PyPI's CUDA wheel on Python 3.12 move these values
# by at most SPREAD (relative); in float32 the same runs already differ by 3e-5 at step 3 and by 1e-2 at
# step 10 (Adam's first step is the sign of each gradient: rounding that flips a tiny gradient moves a
# parameter by the whole learning rate, and a high rate amplifies it), and even float64 differs by 2e-9
# at step 6 at the highest rates, which is why the check stops at 4. Every change to the code tested
# (code/tests/test_replay.py) moves them by more than CHANGE: an init's std +0.1% (4e-5), a norm's eps /10
# (2e-7), the warmup one step longer (5e-3), the clip 10% tighter where it binds (1e-8).
EARLY_STEPS = 4
EARLY_WINDOWS = 16
SPREAD = 5e-13  # the largest relative difference measured between kernels at the check's steps
CHANGE = 1e-8  # the smallest difference a change to the code tested made
TOLERANCE = 1e-10  # two hundred times the spread, a hundred times below the smallest change


def mode() -> str:
    """$NORMLAB_BOARDS: ``stored`` (default), ``live`` or ``strict``."""
    value = os.environ.get(MODE_VAR, "").strip() or "stored"
    if value not in MODES:
        raise ValueError(f"{MODE_VAR}={value!r} is not a mode; valid choices: {', '.join(MODES)}")
    return value


# Which scale's boards a page shows: its own, except at the gpu scale, whose sweeps would not fit a
# Colab GPU's 10 minutes (estimated on the costs page): it shows the largest stored boards, the cpu ones.
BOARD_SCALE = {"ci": "ci", "cpu": "cpu", "gpu": "cpu"}


def board_path(name: str, scale: Optional[str] = None) -> Path:
    """Where the board ``name`` for ``scale`` (default: the board scale of this page, `BOARD_SCALE`)
    ships: inside normlab, found wherever normlab is installed (a clone, a wheel on Colab)."""
    return Path(str(files("normlab") / "boards")) / f"{name}-{scale or BOARD_SCALE[get_scale()]}.json.xz"


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}


def config_with_defaults(stored: dict[str, Any]) -> dict[str, Any]:
    """A stored run's config with every TrainConfig field added after the run was stored filled in
    at its default: the run was trained under that default."""
    return {**_DEFAULTS, **stored}


def _config_of(config: TrainConfig, stored: dict[str, Any]) -> dict[str, Any]:
    """``config`` as a stored run's config reads: a field added to TrainConfig after the run was
    stored, at its default value, is left out (the converse of `config_with_defaults`)."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k in stored or v != _DEFAULTS[k]}


def job_of(result: TrainResult) -> tuple[dict[str, Any], TrainConfig]:
    """The job (model kwargs, TrainConfig) that trained ``result``."""
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in config_with_defaults(result.config).items()}
    return dict(result.model), TrainConfig(**config)


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


def fingerprint(model_kwargs: dict[str, Any], config: TrainConfig, corpus: Optional[Corpus] = None) -> list[float]:
    """The early check of one run: its loss at initialisation (on `EARLY_WINDOWS` validation windows),
    then its training loss at each of its first `EARLY_STEPS` steps of ``config``'s schedule, trained in
    float64 on the CPU, where rounding moves them by about 1e-12 and any change to the code by far more."""
    config = dataclasses.replace(config, eval_windows=EARLY_WINDOWS)  # scores, never trains: the runs are the same
    result = run(model_kwargs, config, corpus=corpus, device=torch.device("cpu"), stop_after=EARLY_STEPS,
                 dtype=torch.float64)  # fmt: skip
    return [float(result.initial_val if result.initial_val is not None else math.nan), *result.losses]


def early_meta(results: Sequence[TrainResult], corpus: Optional[Corpus] = None) -> dict[str, Any]:
    """What a board stores to be checked by: every run's `fingerprint`, made with the code that trained it."""
    corpus = corpus or load_corpus()
    return {"steps": EARLY_STEPS, "windows": EARLY_WINDOWS, "dtype": "float64",
            "fingerprints": [fingerprint(*job_of(r), corpus) for r in results]}  # fmt: skip


def _difference(stored: Sequence[float], fresh: Sequence[float]) -> float:
    """The largest relative difference of two fingerprints (inf when one run stopped sooner)."""
    if len(stored) != len(fresh):
        return math.inf
    worst = 0.0
    for a, b in zip(stored, fresh):
        if math.isnan(a) and math.isnan(b):
            continue
        worst = max(worst, abs(a - b) / max(abs(a), 1e-300)) if math.isfinite(a - b) else math.inf
    return worst


@dataclass
class Check:
    """The early check of a board: (run index, largest relative difference) per run trained again,
    and why no check could be made ('' when it was)."""

    differences: list[tuple[int, float]] = field(default_factory=list)
    missing: str = ""

    @property
    def worst(self) -> float:
        return max((d for _, d in self.differences), default=math.nan)

    @property
    def confirmed(self) -> bool:
        return not self.missing and bool(self.differences) and self.worst <= TOLERANCE

    def sentence(self, runs: int) -> str:
        """One sentence for the page: what was checked, and what the result means."""
        n = len(self.differences)
        if self.confirmed:
            return (f"confirmed: {n} of its {runs} runs, trained again here for {EARLY_STEPS} steps in float64, "
                    f"match it to {self.worst:.0e} (other processors' rounding moved such runs by up to "
                    f"{SPREAD:.0e}, each change to the code tested by {CHANGE:.0e} or more)")  # fmt: skip
        if self.missing:
            return (f"NOT confirmed: {self.missing}; the results below are the stored board as it was made, "
                    f"unchecked here; {MODE_VAR}=live trains its {runs} runs here")  # fmt: skip
        off = [(i, d) for i, d in self.differences if not d <= TOLERANCE]
        runs_text = ", ".join(f"run {i} by {d:.1e}" for i, d in off[:3]) + (" ..." if len(off) > 3 else "")
        return (f"NOT confirmed: {len(off)} of the {n} runs trained again here differ from the board in their first "
                f"{EARLY_STEPS} steps ({runs_text}; rounding moves them by up to {SPREAD:.0e}), so the code that "
                f"made this board has changed: the results below are the stored board, not what this code computes; "
                f"{MODE_VAR}=live trains its {runs} runs here")  # fmt: skip


def confirm(meta: dict[str, Any], jobs: Sequence[tuple[dict[str, Any], TrainConfig]], indices: Sequence[int],
            corpus: Optional[Corpus] = None) -> Check:  # fmt: skip
    """Train ``jobs[i]`` for each of ``indices`` for its first steps in float64 and compare with the
    fingerprints stored in a board's ``meta`` (`early_meta`)."""
    early = meta.get("early")
    if not early or len(early.get("fingerprints", [])) != len(jobs):
        return Check(missing="the board holds no early fingerprints to check it by")
    if early.get("steps", 0) < EARLY_STEPS or early.get("windows") != EARLY_WINDOWS:
        return Check(missing=f"its fingerprints are of {early.get('steps')} steps on {early.get('windows')} windows, "
                             f"this normlab checks {EARLY_STEPS} on {EARLY_WINDOWS}")  # fmt: skip
    corpus = corpus or load_corpus()
    stored = [early["fingerprints"][i][: EARLY_STEPS + 1] for i in indices]  # a board may store more steps
    return Check([(i, _difference(s, fingerprint(*jobs[i], corpus))) for i, s in zip(indices, stored)])


@dataclass
class Replay:
    """What `replay_or_run` returns: the results, where they came from ("stored", "unconfirmed": the stored
    board shown although its check failed, or "live"), why in one sentence, the early check, the metadata."""

    results: list[TrainResult]
    source: str
    why: str
    check: Check = field(default_factory=Check)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def largest_difference(self) -> float:
        """The largest relative difference of the early check (nan when none was made)."""
        return self.check.worst


def _check_indices(check: Sequence[int], n: int) -> None:
    if not check:
        raise ValueError("check must name at least one job to train again (indices into jobs)")
    bad = [i for i in check if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n]
    if bad:
        raise ValueError(f"check indices must be in [0, {n}), got {bad}")


def verdict(name: str, check: Check, runs: int) -> tuple[str, str]:
    """(source, sentence) for a board whose runs are the sweep's: "stored" when its check confirms it;
    otherwise "unconfirmed", said on stderr too, or a ValueError under NORMLAB_BOARDS=strict."""
    sentence = check.sentence(runs)
    if check.confirmed:
        return "stored", sentence
    if mode() == "strict":
        raise ValueError(f"{name}: {sentence} ({MODE_VAR}=strict: make the boards again with scripts/make_boards.sh)")
    print(f"normlab: {name}: {sentence}", file=sys.stderr)
    return "unconfirmed", sentence


def replay_or_run(
    path: Union[str, Path],
    jobs: Sequence[tuple[dict[str, Any], TrainConfig]],
    check: Union[Sequence[int], Callable[[list[TrainResult]], Sequence[int]]],
    *,
    corpus: Corpus | None = None,
    **sweep: Any,
) -> Replay:
    """The results of ``jobs`` from the board at ``path`` (`save_results`) if it holds exactly these
    runs in this order, checked by `confirm` on the runs at indices ``check`` (or a function of the
    stored results that returns them); otherwise, or under NORMLAB_BOARDS=live, all of ``jobs`` trained
    live, with the reason. ``sweep`` goes to `run_many` (store, desc, workers, ...)."""
    corpus = corpus or load_corpus()
    path = Path(path)
    if not callable(check):
        _check_indices(check, len(jobs))
    if mode() == "live":
        why = f"trained here, as {MODE_VAR}=live asks"
    elif not path.exists():
        why = f"no stored board at {path.name}"
    else:
        try:
            stored, meta = load_results(path, corpus)
            why = mismatch(jobs, stored)
        except ValueError as error:
            why = str(error)
        if not why:
            check = check(list(stored)) if callable(check) else check
            _check_indices(check, len(jobs))
            result = confirm(meta, jobs, check, corpus)
            source, sentence = verdict(path.name, result, len(jobs))
            return Replay(list(stored), source, sentence, result, meta)
        why = f"the board holds other runs than this sweep ({why})"
    print(f"normlab: {path.name}: {why}; training all {len(jobs)} runs live", file=sys.stderr)
    return Replay(run_many(jobs, corpus=corpus, **sweep), "live", why)


def stored_sweep(
    name: str,
    jobs: Sequence[tuple[dict[str, Any], TrainConfig]],
    check: Union[Sequence[int], Callable[[list[TrainResult]], Sequence[int]]],
    *,
    corpus: Corpus | None = None,
    scale: Optional[str] = None,
    **sweep: Any,
) -> Replay:
    """A chapter's sweep: its board for ``scale`` (default: this page's) shipped with normlab
    (`board_path`), replayed under `replay_or_run`'s rule. With NORMLAB_RESULTS_DIR set (a maintainer
    making the boards) it always trains live."""
    desc = sweep.pop("desc", name)
    if os.environ.get(RESULTS_DIR_VAR):
        why = f"trained now, to be stored ({RESULTS_DIR_VAR} is set)"
        return Replay(run_many(jobs, corpus=corpus, desc=desc, **sweep), "live", why)
    return replay_or_run(board_path(name, scale), jobs, check, corpus=corpus, desc=desc, **sweep)


def save_sweep(name: str, results: Sequence[TrainResult], meta: dict[str, Any]) -> Path | None:
    """Save ``results`` (with ``meta``: provenance and what the chapter needs to read them back) and
    their early fingerprints as the board ``name`` at this scale in NORMLAB_RESULTS_DIR, if set;
    returns the path, or None."""
    out = os.environ.get(RESULTS_DIR_VAR)
    if not out:
        return None
    path = Path(out) / board_path(name, get_scale()).name
    path.parent.mkdir(parents=True, exist_ok=True)
    save_results(path, list(results), {**meta, "early": early_meta(results)})
    print(f"saved {path}")
    return path
