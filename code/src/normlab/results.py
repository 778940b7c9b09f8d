"""Run many training jobs and keep their results in a small JSON file with their provenance, so a
stored result always says what produced it: configuration, code and torch versions, device, data.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import inspect
import json
import math
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch
from tqdm.auto import tqdm

from .data import Corpus, load_corpus
from .model import Placement
from .scale import get_device, get_scale, seed_base
from .train import Probe, TrainConfig, TrainResult, lr_multiplier, run

__all__ = ["run_many", "default_workers", "SweepError", "provenance", "save_results", "load_results"]


class SweepError(RuntimeError):
    """Some runs of a sweep raised. The others finished (and, with a store, were saved); ``failures``
    holds (job index, model kwargs, config, traceback text) for each failed run."""

    def __init__(self, failures: list[tuple[int, dict[str, Any], TrainConfig, str]], total: int) -> None:
        self.failures = failures
        lines = [f"{len(failures)} of {total} runs failed; the others finished:"]
        for i, model_kwargs, config, tb in failures:
            last = tb.strip().splitlines()[-1] if tb.strip() else "no traceback"
            what = f"model {model_kwargs}, lr {config.lr}, warmup {config.warmup}, seed {config.seed}"
            lines.append(f"  job {i}: {what}: {last}")
        super().__init__("\n".join(lines))


def default_workers() -> int:
    """How many worker processes `run_many` uses by default: one per core this process may use,
    where worker processes can start by forking (Linux) and the runs train on the CPU; else 1.

    Forking is what lets a notebook's own probe functions reach the workers; on macOS and
    Windows, and on a GPU (where many processes would share one device), runs stay in-process.
    """
    if get_device().type != "cpu" or "fork" not in mp.get_all_start_methods() or sys.platform == "darwin":
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - platforms without sched_getaffinity
        return max(1, os.cpu_count() or 1)


def _source(fn: Optional[Probe]) -> Optional[str]:
    if fn is None:
        return None
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return getattr(fn, "__qualname__", repr(fn))


def _job_key(
    model_kwargs: dict[str, Any], config: TrainConfig, probe: Optional[Probe], final_probe: Optional[Probe]
) -> str:
    """A name for one run in a store: a hash of everything that determines its result."""
    from . import __version__

    spec = {"model": _encode_model(model_kwargs), "config": dataclasses.asdict(config), "probe": _source(probe),
            "final_probe": _source(final_probe), "normlab": __version__, "torch": torch.__version__}  # fmt: skip
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=repr).encode()).hexdigest()[:20]


# The sweep a worker process reads its jobs from. It is set in the parent before the workers fork,
# so only job indices and results cross between processes (a notebook's probe needs no pickling).
_SWEEP: dict[str, Any] = {}


def _init_worker() -> None:
    # One torch thread per worker: two 1-thread processes on 2 cores each run at solo speed.
    torch.set_num_threads(1)


def _run_job(i: int) -> tuple[int, Optional[TrainResult], Optional[str]]:
    model_kwargs, config = _SWEEP["jobs"][i]
    try:
        sweep = _SWEEP
        result = run(
            model_kwargs, config, corpus=sweep["corpus"], probe=sweep["probe"], final_probe=sweep["final_probe"]
        )
        return i, result, None
    except Exception:
        return i, None, traceback.format_exc()


def run_many(
    jobs: Sequence[tuple[dict[str, Any], TrainConfig]],
    *,
    corpus: Optional[Corpus] = None,
    progress: bool = False,
    desc: str = "runs",
    probe: Optional[Probe] = None,
    final_probe: Optional[Probe] = None,
    workers: Optional[int] = None,
    store: Union[str, Path, None] = None,
    batched: Optional[bool] = None,
) -> list[TrainResult]:
    """`run` every (model kwargs, config) pair; the results come back in the order of ``jobs``.

    ``workers`` processes (default `default_workers`: the cores there are) train the runs side by
    side, one torch thread each; every run seeds itself, so the results equal a sequential sweep's.
    ``progress=True`` shows one bar counting finished runs. ``probe`` and ``final_probe`` are passed
    to every `run`.
    ``store`` (a directory) makes the sweep resumable: each run is saved there as it finishes, at
    full precision, and a rerun loads the runs already stored instead of training them again, so an
    interrupted sweep (a Colab disconnect, a laptop that sleeps) picks up where it stopped and ends
    with the same results. A run that raises does not stop the others: they finish (and are
    stored), then a `SweepError` names each failed run's configuration.

    ``batched`` (default: on a GPU) trains runs that share an architecture and a step loop as one
    computation (`normlab.batched.train_batched`: a tiny model alone leaves a GPU idle); runs with
    a probe, tracking or dropout are trained one by one. The curves equal the one-by-one runs' to
    float tolerance, not bit for bit, so the CPU default is off.
    """
    corpus = corpus or load_corpus()
    jobs = list(jobs)
    workers = default_workers() if workers is None else workers
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if workers > 1 and (get_device().type != "cpu" or "fork" not in mp.get_all_start_methods()):
        raise ValueError(
            f"workers={workers} needs CPU training on a system that can fork worker processes (Linux); "
            f"here the device is {get_device().type} on {sys.platform}: use workers=1"
        )
    results: list[Optional[TrainResult]] = [None] * len(jobs)
    paths: list[Optional[Path]] = [None] * len(jobs)
    meta = {"provenance": provenance(corpus)} if store is not None else {}
    if store is not None:
        Path(store).mkdir(parents=True, exist_ok=True)
        for i, (model_kwargs, config) in enumerate(jobs):
            paths[i] = Path(store) / f"run-{_job_key(model_kwargs, config, probe, final_probe)}.json"
            if paths[i].exists():
                results[i] = load_results(paths[i], corpus)[0][0]
    todo = [i for i, r in enumerate(results) if r is None]
    failures: list[tuple[int, dict[str, Any], TrainConfig, str]] = []
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(todo), desc=desc, disable=not progress, leave=False)

    def finish(i: int, result: Optional[TrainResult], error: Optional[str]) -> None:
        if error is not None:
            failures.append((i, jobs[i][0], jobs[i][1], error))
        else:
            results[i] = result
            if paths[i] is not None:
                tmp = paths[i].with_suffix(".tmp")
                save_results(tmp, [result], meta, digits=None)
                os.replace(tmp, paths[i])  # a run is stored whole or not at all
        bar.update()

    _SWEEP.update(jobs=jobs, corpus=corpus, probe=probe, final_probe=final_probe)
    batched = get_device().type == "cuda" if batched is None else batched
    try:
        if batched and probe is None and final_probe is None:
            from .batched import batchable, train_batched

            for group in batchable([jobs[i] for i in todo]):
                members = [todo[g] for g in group]
                try:
                    trained = train_batched(jobs[members[0]][0], [jobs[i][1] for i in members], corpus=corpus)
                except Exception:
                    for i in members:
                        finish(*_run_job(i))  # one by one, so a failure names its own run
                    continue
                for i, result in zip(members, trained):
                    finish(i, result, None)
        elif workers == 1 or len(todo) <= 1:
            for i in todo:
                finish(*_run_job(i))
        else:
            with warnings.catch_warnings():
                # Python 3.12 warns about forking a process that has threads (a Jupyter kernel
                # does); the workers only train, on one torch thread each, and never touch them.
                warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
                context = mp.get_context("fork")
                n = min(workers, len(todo))
                pool = ProcessPoolExecutor(n, mp_context=context, initializer=_init_worker)
                done = False
                try:
                    pending = [pool.submit(_run_job, i) for i in todo]
                    for future in as_completed(pending):
                        finish(*future.result())
                    done = True
                except BrokenProcessPool as error:
                    lost = [i for i in todo if results[i] is None and i not in {f[0] for f in failures}]
                    failures.extend((i, jobs[i][0], jobs[i][1], f"a worker process died: {error!r}") for i in lost)
                finally:
                    if not done:  # interrupted: stop the workers now rather than finishing their runs
                        for process in list((getattr(pool, "_processes", None) or {}).values()):
                            process.terminate()
                    pool.shutdown(wait=done, cancel_futures=True)
    finally:
        _SWEEP.clear()
        bar.close()
    if failures:
        raise SweepError(sorted(failures, key=lambda f: f[0]), len(jobs))
    return results  # type: ignore[return-value]


def _git(*args: str) -> Optional[str]:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _device_name() -> str:
    device = get_device()
    if device.type == "cuda":
        return torch.cuda.get_device_name(0)
    if device.type == "mps":
        return f"Apple MPS ({platform.machine()})"
    return f"{platform.machine()} CPU"


def provenance(corpus: Optional[Corpus] = None) -> dict[str, Any]:
    """Where a result came from: scale, seed base, device, versions, code revision (and ``dirty``:
    whether normlab's own source had uncommitted changes), corpus fingerprint, date."""
    from . import __version__

    revision = _git("rev-parse", "--short", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".") if revision else None
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "scale": get_scale(),
        "seed_base": seed_base(),
        "device": _device_name(),
        "torch_threads": torch.get_num_threads(),
        "normlab": __version__,
        "revision": revision or "not a git checkout",
        "dirty": bool(status) if revision else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "corpus_sha256": corpus.fingerprint[:12] if corpus is not None else None,
    }


def _round(obj: Any, digits: Optional[int] = 5) -> Any:
    """Floats to ``digits`` significant digits (a stored grid stays small and diffs stay readable;
    None keeps them whole); a value that is not a finite number becomes null, so the file is strict
    JSON."""
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        return obj if digits is None else float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _round(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_round(v, digits) for v in obj]
    return obj


def _encode_value(v: Any) -> Any:
    if isinstance(v, Placement):
        return {"Placement": dataclasses.asdict(v)}
    if isinstance(v, (list, tuple)) and v and all(isinstance(p, Placement) for p in v):  # one per block
        return {"Placements": [dataclasses.asdict(p) for p in v]}
    return v


def _decode_value(v: Any) -> Any:
    if isinstance(v, dict) and set(v) == {"Placement"}:
        return Placement(**v["Placement"])
    if isinstance(v, dict) and set(v) == {"Placements"}:
        return tuple(Placement(**p) for p in v["Placements"])
    return v


def _encode_model(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: _encode_value(v) for k, v in kwargs.items()}


def _decode_model(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: _decode_value(v) for k, v in kwargs.items()}


def save_results(
    path: Union[str, Path], results: Sequence[TrainResult], meta: dict[str, Any], *, digits: Optional[int] = 5
) -> None:
    """Write ``results`` and ``meta`` (e.g. ``{"provenance": provenance(corpus), "grid": ...}``) as
    strict JSON, floats to ``digits`` significant digits (None: exact), without the per-step learning
    rates (the config gives them); `load_results` gives back equal results."""
    rows = []
    for r in results:
        # The per-step learning rates follow from the config: `load_results` recomputes them.
        row = {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name not in ("trained_model", "lrs")}
        row["model"] = _encode_model(r.model)
        rows.append(row)
    payload = _round({"meta": meta, "results": rows}, digits)
    Path(path).write_text(json.dumps(payload, separators=(",", ":"), allow_nan=False) + "\n")


def load_results(
    path: Union[str, Path], corpus: Optional[Corpus] = None, *, check_corpus: bool = True
) -> tuple[list[TrainResult], dict[str, Any]]:
    """Read what `save_results` wrote: the results and their metadata. With ``check_corpus`` (the
    default) the stored corpus fingerprint must match ``corpus`` (default: the shipped corpus), so
    results trained on other data are never read as if they were ours."""
    payload = json.loads(Path(path).read_text())
    meta = payload["meta"]
    stored = meta.get("provenance", {}).get("corpus_sha256")
    if check_corpus:
        live = (corpus or load_corpus()).fingerprint[:12]
        if stored != live:
            raise ValueError(
                f"{path} was trained on corpus {stored}, not on this corpus ({live}); "
                "rerun it, or pass check_corpus=False to read it anyway"
            )
    results = []
    for r in payload["results"]:
        r["evals"] = [tuple(e) for e in r["evals"]]
        r["model"] = _decode_model(r["model"])
        r["config"]["betas"] = tuple(r["config"]["betas"])
        c = r["config"]
        r["lrs"] = [
            c["lr"] * lr_multiplier(c["schedule"], step, warmup=c["warmup"], total=c["steps"],
                                    min_ratio=c["min_lr_ratio"], decay_fraction=c.get("decay_fraction", 0.2))
            for step in range(1, len(r["losses"]) + 1)
        ]  # fmt: skip
        results.append(TrainResult(**r))
    return results, meta
