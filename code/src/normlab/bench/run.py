"""The whole benchmark in one call, `run_benchmark`: steps, cost, sweeps on worker processes,
batched sweeps on a GPU, memory, with provenance.
"""

from __future__ import annotations

import inspect
import os
import statistics
import time
from dataclasses import asdict
from typing import Any, Callable, Optional, Sequence

import torch

from ..data import Corpus, load_corpus
from ..results import provenance, run_many
from ..scale import get_device
from ..timing import sync
from ..training import TrainConfig, run
from .steps import BATCHED_KS, SIZES, _bench_cost, _cpu_model, _peak_rss_mib, _step_rows


def _sweep_jobs(n_runs: int, steps: int) -> list[tuple[dict[str, Any], TrainConfig]]:
    size = SIZES["ci"]
    model = {"d_model": size.d_model, "n_heads": size.n_heads, "n_layers": size.n_layers, "max_seq_len": size.seq}
    return [
        (dict(model), TrainConfig(steps=steps, batch_size=size.batch, seq_len=size.seq, seed=s)) for s in range(n_runs)
    ]


def _bench_sweep(corpus: Corpus, n_runs: int, steps: int, repeats: int, log: Callable[[str], None]) -> dict[str, Any]:
    if get_device().type != "cpu":
        return {"skipped": f"run_many trains in worker processes on the CPU only (here: {get_device().type})"}
    jobs = _sweep_jobs(n_runs, steps)
    run_many(jobs[:2], corpus=corpus, workers=2, progress=False)  # start the pool once: a kernel pays it once too
    seconds: dict[int, list[float]] = {1: [], 2: []}
    losses: dict[int, list[list[float]]] = {}
    # In-process runs at one thread, like each worker, so the two settings differ only in parallelism
    # (and the losses can be compared bit for bit).
    torch.set_num_threads(1)
    for r in range(repeats):
        for workers in (1, 2) if r % 2 == 0 else (2, 1):
            log(f"sweep: {n_runs} runs of {steps} steps, workers={workers} (repeat {r + 1}/{repeats})")
            t0 = time.perf_counter()
            results = run_many(jobs, corpus=corpus, workers=workers, progress=False)
            seconds[workers].append(time.perf_counter() - t0)
            losses[workers] = [list(res.losses) for res in results]
    med = {w: statistics.median(s) for w, s in seconds.items()}
    diffs = [abs(a - b) for la, lb in zip(losses[1], losses[2]) for a, b in zip(la, lb)]
    return {
        "runs": n_runs,
        "steps": steps,
        **asdict(SIZES["ci"]),
        "repeats": repeats,
        "seconds": {str(w): s for w, s in seconds.items()},
        "runs_per_s": {str(w): n_runs / m for w, m in med.items()},
        "speedup": med[1] / med[2],
        "losses_identical": losses[1] == losses[2],
        "max_abs_loss_diff": max(diffs) if diffs else 0.0,
    }


def _bench_batched(corpus: Corpus, device: torch.device, steps: int, log: Callable[[str], None]) -> dict[str, Any]:
    if device.type != "cuda":
        return {"skipped": "train_batched is timed on CUDA only"}
    try:
        from ..batched import train_batched
    except ImportError:
        return {"skipped": "normlab.batched is not available"}
    jobs = _sweep_jobs(max(BATCHED_KS), steps)
    model_kwargs = jobs[0][0]
    extra = {"corpus": corpus} if "corpus" in inspect.signature(train_batched).parameters else {}
    n_sequential = 3
    log(f"batched: {n_sequential} sequential runs to extrapolate from")
    run(model_kwargs, jobs[0][1], corpus=corpus, device=device)  # warm-up: kernels, allocator
    seq_seconds = []
    for _, config in jobs[:n_sequential]:
        sync(device)
        t0 = time.perf_counter()
        run(model_kwargs, config, corpus=corpus, device=device)
        sync(device)
        seq_seconds.append(time.perf_counter() - t0)
    per_run = statistics.median(seq_seconds)
    out: dict[str, Any] = {"steps": steps, "sequential_seconds": seq_seconds, "sequential_s_per_run": per_run, "k": {}}
    try:
        train_batched(model_kwargs, [c for _, c in jobs[: min(BATCHED_KS)]], **extra)  # warm-up
        for k in BATCHED_KS:
            log(f"batched: K={k}")
            sync(device)
            t0 = time.perf_counter()
            train_batched(model_kwargs, [c for _, c in jobs[:k]], **extra)
            sync(device)
            dt = time.perf_counter() - t0
            out["k"][str(k)] = {
                "seconds": dt,
                "runs_per_s": k / dt,
                "sequential_extrapolated_s": per_run * k,
                "speedup": per_run * k / dt,
            }
    except Exception as err:  # another module's failure is a result to report, not a reason to lose the rest
        out["error"] = f"{type(err).__name__}: {err}"
    return out


# --------------------------------------------------------------------------------------------
# The public entry points
# --------------------------------------------------------------------------------------------


def _check_args(sizes: Sequence[str], threads: Sequence[int], repeats: int) -> None:
    bad = [s for s in sizes if s not in SIZES]
    if bad or not sizes:
        raise ValueError(f"unknown size(s) {bad or list(sizes)!r}; valid choices: {', '.join(SIZES)}")
    for n in threads:
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ValueError(f"thread counts must be positive integers (1, 2, ...), got {n!r}")
    if not threads:
        raise ValueError("give at least one thread count, e.g. 1")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats <= 0:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")


def _resolve_args(
    sizes: Optional[Sequence[str]],
    threads: Optional[Sequence[int]],
    repeats: Optional[int],
    *,
    quick: bool,
    device: torch.device,
) -> tuple[list[str], list[int], int]:
    """The defaults filled in, then checked."""
    if sizes is None:
        sizes = ["ci"] if quick else ["ci", "cpu"] + (["gpu"] if device.type == "cuda" else [])
    threads = [1] if threads is None and quick else [1, 2] if threads is None else threads
    repeats = (3 if quick else 11) if repeats is None else repeats
    sizes, threads = list(sizes), list(threads)
    _check_args(sizes, threads, repeats)
    return sizes, threads, repeats


def run_benchmark(
    sizes: Optional[Sequence[str]] = None,
    threads: Optional[Sequence[int]] = None,
    repeats: Optional[int] = None,
    *,
    quick: bool = False,
    device: Optional[torch.device] = None,
    corpus: Optional[Corpus] = None,
    log: Optional[Callable[[str], None]] = None,
) -> dict[str, Any]:
    """Measure everything once and return it as one JSON-ready dict (``format_table`` prints it).

    ``sizes`` are names in `SIZES` (default ci, cpu; plus gpu on CUDA), ``threads`` torch thread counts
    (default 1, 2; ignored on an accelerator, where one row is measured), ``repeats`` the interleaved
    repeats whose medians are reported. ``quick`` makes the defaults a smoke test: ci only, one thread,
    3 repeats, a sweep of 4 runs of 10 steps. Explicit arguments win over ``quick``. The process's torch
    thread count is restored afterwards; ``log`` receives a line before each measurement.
    """
    device = device or get_device()
    accelerator = device.type != "cpu"
    sizes, threads, repeats = _resolve_args(sizes, threads, repeats, quick=quick, device=device)
    log = log or (lambda line: None)
    min_seconds = 0.02 if quick else 0.15
    sweep_runs, sweep_steps, sweep_repeats = (4, 10, 1) if quick else (8, 40, 3)

    corpus = corpus or load_corpus()
    start_threads = torch.get_num_threads()
    info = provenance(corpus)
    env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS")}
    row_threads: list[Optional[int]] = [None] if accelerator else list(threads)
    info.update({
        "threads_used": row_threads, "torch_threads_at_start": start_threads, "env": env,
        "cpu_count": os.cpu_count(), "cpu_model": _cpu_model(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    })  # fmt: skip
    started = time.perf_counter()
    try:
        steps = []
        for name in sizes:
            steps += _step_rows(name, row_threads, device, repeats, min_seconds, log)
        cost = _bench_cost(device, repeats, min_seconds, None if accelerator else 1, log)
        sweep = _bench_sweep(corpus, sweep_runs, sweep_steps, sweep_repeats, log)
        batched = _bench_batched(corpus, device, sweep_steps, log)
    finally:
        torch.set_num_threads(start_threads)
    memory: dict[str, Any] = {"process_peak_rss_mib": _peak_rss_mib()}
    if device.type == "cuda":
        memory["cuda_peak_mib"] = {row["size"]: row["cuda_peak_mib"] for row in steps}
    return {
        "provenance": info,
        "device": info["device"] if accelerator else f"{info['device']} ({info['cpu_model']})",
        "repeats": repeats,
        "sizes": sizes,
        "steps": steps,
        "cost": cost["rows"],
        "matmul_ceiling": [row.pop("matmul") for row in steps] + [cost["matmul"]],
        "sweep": sweep,
        "batched": batched,
        "memory": memory,
        "seconds_total": time.perf_counter() - started,
    }
