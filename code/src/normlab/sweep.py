"""Sweeps: many training runs as self-contained tasks on any `concurrent.futures.Executor` (loky's
spawn-based pool by default, Dask or Ray past one machine), resumable through a store of valid runs.

Every run seeds itself and trains on one torch thread in its worker, so a sweep's results equal a
sequential sweep's bit for bit on every executor. Progress goes to the build's output, not the page.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import os
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch
from tqdm.auto import tqdm

from . import checks
from .data import Corpus, CorpusSpec, load_corpus
from .record import TrainResult
from .scale import get_device
from .store import Unkeyable, atomic_write_text, callable_key, check_writable, job_key, set_aside, source_hash
from .training import Probe, TrainConfig, check_job, run

__all__ = ["run_many", "default_workers", "default_executor", "SweepError", "run_task", "run_group_task"]

Job = tuple[dict[str, Any], TrainConfig]
Failure = tuple[int, dict[str, Any], TrainConfig, str]
WORKER_THREADS = 1  # two 1-thread processes on 2 cores each run at solo speed; a second thread in one gives 1.06x
IDLE_SECONDS = 300  # the default pool keeps its workers this long between sweeps (start-up is paid once)
REPORT_EVERY = 30.0  # seconds between progress lines in the build's output


class SweepError(RuntimeError):
    """Some runs of a sweep failed (raised, or could not be stored). The others finished (and, with
    a store, were saved): ``results`` holds every run in job order, None where one failed, and
    ``failures`` (job index, model kwargs, config, traceback text) for each failed run."""

    def __init__(self, failures: list[Failure], total: int, results: Optional[list[Optional[TrainResult]]] = None):
        self.failures, self.results = failures, results
        lines = [f"{len(failures)} of {total} runs failed; the others finished:"]
        for i, model_kwargs, config, tb in failures:
            last = tb.strip().splitlines()[-1] if tb.strip() else "no traceback"
            what = f"model {model_kwargs}, lr {config.lr}, warmup {config.warmup}, seed {config.seed}"
            lines.append(f"  job {i}: {what}: {last}")
        super().__init__("\n".join(lines))


def default_workers() -> int:
    """How many worker processes `run_many` uses by default: one per core this process may use
    when the runs train on the CPU; 1 on a GPU, where the runs train in-process, batched."""
    if get_device().type != "cpu":
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS and Windows have no sched_getaffinity
        return max(1, os.cpu_count() or 1)


def _init_worker(parent: int) -> None:
    """In each worker of the default pool: one torch thread, and exit as soon as the parent (a
    kernel, a script) is gone, even in the middle of a run: a restarted Colab runtime or a killed
    build leaves no orphan training on."""
    torch.set_num_threads(WORKER_THREADS)
    # A session of its own: Linux's scheduler (autogroup, on in desktop distributions) shares the
    # CPU between sessions, so workers left in a Jupyter kernel's session share one core's worth
    # with it whenever another program is busy. Measured beside one busy process (8 runs on 2
    # workers under nbclient): 30.6 s in the kernel's session, 21.9 s in their own; 12.9 s quiet.
    if hasattr(os, "setsid"):
        try:
            os.setsid()
        except OSError:  # already a session or group leader: nothing to gain
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="normlab-parent-watch", daemon=True).start()


def default_executor(workers: int) -> cf.Executor:
    """loky's reusable pool of ``workers`` spawned processes (joblib's executor): no fork from a
    multi-threaded kernel, functions defined in a notebook travel by cloudpickle, and the workers
    stay between sweeps for `IDLE_SECONDS`, so their start-up is paid once per kernel."""
    from loky import get_reusable_executor

    env = {"OMP_NUM_THREADS": str(WORKER_THREADS), "MKL_NUM_THREADS": str(WORKER_THREADS)}
    return get_reusable_executor(
        max_workers=workers, timeout=IDLE_SECONDS, initializer=_init_worker, initargs=(os.getpid(),), env=env
    )


def run_task(
    model_kwargs: dict[str, Any],
    config: TrainConfig,
    corpus: CorpusSpec,
    probe: Optional[Probe] = None,
    final_probe: Optional[Probe] = None,
    threads: int = WORKER_THREADS,
) -> tuple[Optional[TrainResult], Optional[str]]:
    """One run as a self-contained task for any executor's worker: it loads the corpus itself,
    sets its own thread count, trains, and returns (result, None) or (None, the traceback text)."""
    try:
        torch.set_num_threads(threads)
        return run(model_kwargs, config, corpus=corpus.load(), probe=probe, final_probe=final_probe), None
    except Exception:
        return None, traceback.format_exc()


def run_group_task(
    model_kwargs: dict[str, Any], configs: list[TrainConfig], corpus: CorpusSpec, threads: Optional[int] = None
) -> tuple[Optional[list[TrainResult]], Optional[str]]:
    """Runs of one architecture trained as one batched computation (`normlab.batched`), as a task:
    on a multi-GPU machine, one such group per GPU worker."""
    from .batched import train_batched

    try:
        if threads is not None:
            torch.set_num_threads(threads)
        return train_batched(model_kwargs, configs, corpus=corpus.load()), None
    except Exception:
        return None, traceback.format_exc()


class _Progress:
    """Progress lines in the build's output: a notebook kernel's original stderr (the terminal that
    runs jupyter-book), never the page; a plain stream elsewhere. Optionally a bar on the page."""

    def __init__(self, desc: str, total: int, done: int, workers: str, bar: bool, log: bool) -> None:
        self.desc, self.total, self.done, self.log = desc, total, done, log
        self.start = self.last = time.monotonic()
        self.first_done, self.failed = done, 0
        self.bar = tqdm(total=total, initial=done, desc=desc, disable=not bar, leave=False)
        if total - done:
            self._say(f"{total - done} of {total} runs to train ({done} from the store) on {workers}")

    def _say(self, text: str) -> None:
        if not self.log:
            return
        line = f"normlab: {self.desc}: {text}\n"
        stream = sys.stderr
        try:
            if type(stream).__module__.startswith("ipykernel"):
                # The kernel process's own stderr, the terminal of the build, not the cell's output:
                # ipykernel keeps a copy of the original fd when it captures fd 2, else fd 2 is it.
                try:
                    fd = stream.fileno()
                except (OSError, ValueError):
                    fd = 2
                os.write(fd, line.encode())
            else:
                stream.write(line)
                stream.flush()
        except (OSError, ValueError, AttributeError):
            pass  # no terminal to report to: nothing is lost but the line

    def update(self, failed: bool = False) -> None:
        self.done += 1
        self.failed += failed
        self.bar.update()
        now = time.monotonic()
        if now - self.last >= REPORT_EVERY and self.done < self.total:
            self.last = now
            rate = (now - self.start) / max(self.done - self.first_done, 1)
            left = rate * (self.total - self.done)
            self._say(f"{self.done}/{self.total} runs finished, {_duration(now - self.start)}, "
                      f"about {_duration(left)} to go")  # fmt: skip

    def close(self) -> None:
        self.bar.close()
        if self.done > self.first_done:
            failed = f", {self.failed} of them failed" if self.failed else ""
            self._say(f"{self.done}/{self.total} runs finished in {_duration(time.monotonic() - self.start)}{failed}")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _adamw_kernel(device: torch.device) -> str:
    """Which AdamW implementation `normlab.training.make_adamw` gets on this device: fused or not."""
    key = str(device)
    if key not in _KERNELS:
        try:
            torch.optim.AdamW([torch.zeros(1, device=device, requires_grad=True)], fused=True)
            _KERNELS[key] = "fused"
        except (RuntimeError, TypeError, ValueError):
            _KERNELS[key] = "default"
    return _KERNELS[key]


_KERNELS: dict[str, str] = {}
# How many runs this process has taken from a run store instead of training them: the claim-rate
# sweep (scripts/claim_rates.py) reads it, because an execution that resumed runs does not time a fresh one.
runs_from_store = 0


def _device_key(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def _check_jobs(jobs: Any) -> list[Job]:
    try:
        jobs = list(jobs)
    except TypeError:
        raise ValueError(f"jobs must be a sequence of (model kwargs, TrainConfig) pairs, got {jobs!r:.80}") from None
    for i, job in enumerate(jobs):
        if not (isinstance(job, (tuple, list)) and len(job) == 2):
            raise ValueError(f"job {i} must be a (model kwargs, TrainConfig) pair, got {job!r:.80}")
        check_job(job[0], job[1], where=f"run_many job {i}")
    return [(dict(m), c) for m, c in jobs]


def _probe_keys(probe: Optional[Probe], final_probe: Optional[Probe]) -> Optional[dict[str, Any]]:
    """The probes' part of every key, or None (with a warning) when one cannot be keyed."""
    try:
        return {"probe": callable_key(probe) if probe is not None else None,
                "final_probe": callable_key(final_probe) if final_probe is not None else None}  # fmt: skip
    except Unkeyable as error:
        warnings.warn(
            f"run_many: a probe cannot be keyed ({error}), so its runs cannot be told apart from other "
            "probes' in the store: they are trained again and not stored. Give the probe plain values "
            "(numbers, strings, tensors, functions) to close over.",
            stacklevel=3,
        )
        return None


def run_many(
    jobs: Sequence[Job],
    *,
    corpus: Optional[Corpus] = None,
    progress: Optional[bool] = None,
    desc: str = "sweep",
    probe: Optional[Probe] = None,
    final_probe: Optional[Probe] = None,
    workers: Optional[int] = None,
    executor: Optional[cf.Executor] = None,
    store: Union[str, Path, None] = None,
    batched: Optional[bool] = None,
) -> list[TrainResult]:
    """`run` every (model kwargs, config) pair; the results come back in the order of ``jobs``.

    Each run is a self-contained task (`run_task`: its kwargs, config, probes and a corpus spec; it
    loads the corpus and sets one torch thread itself), so the results equal a sequential sweep's
    on every executor. ``executor`` takes any `concurrent.futures.Executor` (a Dask
    ``Client.get_executor()``, Ray's); by default ``workers`` processes (default `default_workers`:
    the cores there are) of loky's reusable pool train the runs on the CPU, and ``workers=1`` trains
    them in this process. ``probe`` and ``final_probe`` are passed to every `run`.

    ``store`` (a directory; see `normlab.store.default_store`) makes the sweep resumable: each run is
    saved as it finishes, at full precision, under a key of everything that changes its result
    (`normlab.store`), and a rerun loads the runs already stored. A run that raises, or cannot be
    stored, does not stop the others: they finish (and are stored), then a `SweepError` names each
    failed run's configuration and carries the others' results.

    ``progress``: None (default) reports to the build's output (runs finished of runs to go, every
    30 s); True also shows a bar on the page; False says nothing. ``desc`` names the sweep there.
    ``batched`` (default: on a GPU) trains runs that share an architecture and a step loop as one
    computation (`normlab.batched.train_batched`); runs with a probe are trained one by one. Batched
    curves equal the one-by-one runs' to float tolerance, not bit for bit, so the CPU default is off.
    """
    jobs = _check_jobs(jobs)
    if workers is not None:
        checks.integer("workers", workers)
    if executor is not None and not isinstance(executor, cf.Executor):
        raise ValueError(f"executor must be a concurrent.futures.Executor, got {type(executor).__name__}")
    if progress is not None:
        checks.flag("progress (None: lines in the build's output)", progress)
    corpus = corpus or load_corpus()
    spec = corpus.spec()
    device = get_device()
    batched = device.type == "cuda" if batched is None else checks.flag("batched", batched)
    use_batched = batched and probe is None and final_probe is None
    workers = default_workers() if workers is None else workers
    in_process = executor is None and workers == 1
    threads = torch.get_num_threads() if in_process or (use_batched and executor is None) else WORKER_THREADS

    from .results import encode_model, load_results, provenance, results_json

    results: list[Optional[TrainResult]] = [None] * len(jobs)
    failures: list[Failure] = []
    paths: list[Optional[Path]] = [None] * len(jobs)
    key_base: Optional[dict[str, Any]] = None
    if store is not None:
        root = check_writable(store)
        for i, (model_kwargs, _) in enumerate(jobs):
            try:
                json.dumps(encode_model(model_kwargs), allow_nan=False)
            except (TypeError, ValueError) as error:
                raise ValueError(f"run_many job {i}: its model kwargs cannot be stored as JSON ({error})") from error
        probes = _probe_keys(probe, final_probe)
        if probes is not None:
            key_base = dict(probes, normlab=source_hash(), torch=torch.__version__,
                            corpus=corpus.fingerprint, device=_device_key(device), adamw=_adamw_kernel(device),
                            threads=threads)  # fmt: skip
    meta = {"provenance": provenance(corpus, threads=threads)}

    def key_path(i: int, path_kind: str) -> Optional[Path]:
        if key_base is None:
            return None
        model_kwargs, config = jobs[i]
        spec_i = dict(key_base, model=encode_model(model_kwargs), config=dataclasses.asdict(config), path=path_kind)
        return root / f"run-{job_key(spec_i)}.json"

    from .batched import _unbatchable, batchable

    def planned(i: int) -> str:
        return "batched" if use_batched and _unbatchable(*jobs[i]) is None else "single"

    for i in range(len(jobs)):
        paths[i] = key_path(i, planned(i))
        if paths[i] is not None and paths[i].exists():
            try:
                results[i] = load_results(paths[i], corpus)[0][0]
            except Exception as error:  # truncated, empty, or not a run file: retrain it
                set_aside(paths[i], f"{type(error).__name__}: {error}")
    todo = [i for i, r in enumerate(results) if r is None]
    global runs_from_store
    runs_from_store += len(jobs) - len(todo)
    where = (
        f"{type(executor).__name__}" if executor is not None
        else "this process" if in_process or len(todo) <= 1
        else f"{min(workers, len(todo))} worker processes"
    )  # fmt: skip
    report = _Progress(desc, len(jobs), len(jobs) - len(todo), where, bar=bool(progress), log=progress is not False)

    def finish(i: int, result: Optional[TrainResult], error: Optional[str], path_kind: str = "single") -> None:
        before = len(failures)
        if error is not None:
            failures.append((i, jobs[i][0], jobs[i][1], error))
        else:
            results[i] = result
            target = key_path(i, path_kind)
            if target is not None:
                try:
                    atomic_write_text(target, results_json([result], meta, digits=None))
                except Exception:
                    failures.append((i, jobs[i][0], jobs[i][1], "trained, but could not be stored:\n"
                                     + traceback.format_exc()))  # fmt: skip
        report.update(failed=len(failures) > before)

    own_pool = executor is None and not in_process and len(todo) > 1 and not use_batched
    pool = executor if executor is not None else default_executor(min(workers, len(todo))) if own_pool else None
    finished = False
    try:
        if use_batched:
            _run_batched(jobs, todo, batchable, spec, pool, threads, finish)
        elif pool is None:
            for i in todo:
                torch_threads = torch.get_num_threads()
                finish(i, *run_task(jobs[i][0], jobs[i][1], spec, probe, final_probe, threads=torch_threads))
        else:
            futures = {pool.submit(run_task, *jobs[i], spec, probe, final_probe): i for i in todo}
            for future in cf.as_completed(futures):
                i = futures[future]
                try:
                    finish(i, *future.result())
                except Exception as error:  # the worker died (killed, out of memory) or the pool broke
                    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
                    finish(i, None, f"a worker process failed ({type(error).__name__}: {first})")
        finished = True
    finally:
        report.close()
        if own_pool and not finished and pool is not None:  # interrupted: stop the workers now
            pool.shutdown(wait=False, kill_workers=True)  # type: ignore[call-arg]
    if failures:
        raise SweepError(sorted(failures, key=lambda f: f[0]), len(jobs), results)
    return results  # type: ignore[return-value]


def _run_batched(jobs, todo, batchable, spec, pool, threads, finish) -> None:  # noqa: ANN001
    """Batched groups, in this process or one task per group on ``pool``; a group that fails is
    reported with its reason and trained one by one instead, so a failure names its own run."""
    from .batched import _unbatchable

    groups = [[todo[g] for g in group] for group in batchable([jobs[i] for i in todo])]
    # A job that cannot be batched (tracking, dropout) is trained as the single run it is, with no
    # batched attempt (and no warning) first.
    singles = [m[0] for m in groups if _unbatchable(*jobs[m[0]]) is not None]
    groups = [m for m in groups if _unbatchable(*jobs[m[0]]) is None]
    if pool is None:
        for i in singles:
            finish(i, *run_task(*jobs[i], spec, threads=torch.get_num_threads()))
    else:
        single_futures = {pool.submit(run_task, *jobs[i], spec, threads=threads): i for i in singles}
        for future in cf.as_completed(single_futures):
            finish(single_futures[future], *future.result())

    def fallback(members: list[int], why: str) -> None:
        warnings.warn(f"run_many: batched training of {len(members)} runs failed ({why}); training them one by one",
                      stacklevel=4)  # fmt: skip
        for i in members:
            finish(i, *run_task(*jobs[i], spec, threads=torch.get_num_threads()))

    def done(members: list[int], trained: Optional[list[TrainResult]], error: Optional[str]) -> None:
        if error is not None:
            fallback(members, error.strip().splitlines()[-1])
            return
        for i, result in zip(members, trained or []):
            finish(i, result, None, "batched")

    if pool is None:
        for members in groups:
            done(members, *run_group_task(jobs[members[0]][0], [jobs[i][1] for i in members], spec, threads))
        return
    futures = {
        pool.submit(run_group_task, jobs[m[0]][0], [jobs[i][1] for i in m], spec): n for n, m in enumerate(groups)
    }
    for future in cf.as_completed(futures):
        members = groups[futures[future]]
        try:
            done(members, *future.result())
        except Exception as error:
            fallback(members, f"{type(error).__name__}: {error}")
