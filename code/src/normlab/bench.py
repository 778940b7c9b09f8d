"""Training-speed benchmarks of normlab, from one run, with provenance: ``python -m normlab.bench --help``.
Steps against PyTorch's own layers, FLOP/s against a matmul ceiling, sweeps, cost against size, memory.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .data import VOCAB_SIZE, Corpus, load_corpus
from .model import TransformerLM
from .results import provenance, run_many
from .scale import get_device
from .training import TrainConfig, make_adamw, run

__all__ = [
    "SIZES",
    "BenchSize",
    "TorchReferenceLM",
    "step_flops",
    "make_train_step",
    "time_interleaved",
    "run_benchmark",
    "format_table",
    "main",
]


@dataclass(frozen=True)
class BenchSize:
    """One model and batch shape the step benchmark times."""

    d_model: int
    n_heads: int
    n_layers: int
    batch: int
    seq: int


SIZES: dict[str, BenchSize] = {
    "ci": BenchSize(32, 4, 5, 16, 32),
    "cpu": BenchSize(64, 4, 12, 16, 32),
    "gpu": BenchSize(128, 4, 24, 32, 64),
}
# Cost against size: depths at d=64 and widths at 4 layers, one batch shape, one thread.
COST_DEPTHS = (2, 4, 8, 12)
COST_WIDTHS = (32, 64, 128)
COST_SHAPE = {"n_heads": 4, "batch": 16, "seq": 32}
BATCHED_KS = (8, 32, 128)
# normlab with plain AdamW (the model against the model), normlab as `train` steps it (AdamW fused
# where torch has it: `make_adamw`), PyTorch's layer stack with plain AdamW, and post-LN normlab.
STEP_MODELS = ("normlab", "normlab_train", "torch", "normlab_post")


class TorchReferenceLM(nn.Module):
    """The same decoder built from PyTorch's own layers (pre-LN, causal, GELU, d_ff = 4d, final norm,
    untied head), for timing only."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(
            d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.stack = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.stack(x, mask=self.mask[:t, :t], is_causal=True))


def step_flops(
    d_model: int, n_layers: int, batch: int, seq: int, vocab: int = VOCAB_SIZE, d_ff: Optional[int] = None
) -> int:
    """FLOPs of one training step (forward, backward) of a decoder-only Transformer, counted analytically.

    With d = ``d_model``, L = ``n_layers``, B = ``batch``, T = ``seq``, V = ``vocab`` and
    d_ff = ``d_ff`` (default 4d), the matmul parameters each token touches are

        P = L * (4 d^2 + 2 d d_ff) + d V      (W_q, W_k, W_v, W_o; the two FFN matrices; the LM head)

    and a multiply-add is 2 FLOPs, so

        forward  = 2 P B T + 2 * 2 L B T^2 d  (the second term: the scores Q K^T and the product with V)
        backward = 2 * forward                (one matmul for the input gradient, one for the weight's)
        step     = 3 * forward.

    The causal mask is not halved: T^2 counts the whole score square, as the usual model-FLOPs
    convention does (PaLM's 6N + 12 L T d per token), so a kernel that skips the masked half gets no
    credit for it. Embedding lookups, biases, norms, softmax, GELU and the AdamW update are left out:
    they are elementwise, O(B T d) or O(parameters), small next to the matmuls at these sizes.
    """
    d_ff = 4 * d_model if d_ff is None else d_ff
    for name, value in (("d_model", d_model), ("n_layers", n_layers), ("batch", batch), ("seq", seq),
                        ("vocab", vocab), ("d_ff", d_ff)):  # fmt: skip
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"step_flops: {name} must be a positive integer, got {value!r}")
    params = n_layers * (4 * d_model * d_model + 2 * d_model * d_ff) + d_model * vocab
    tokens = batch * seq
    forward = 2 * params * tokens + 2 * 2 * n_layers * batch * seq * seq * d_model
    return 3 * forward


# --------------------------------------------------------------------------------------------
# Timing helpers
# --------------------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    # Kernels on an accelerator run asynchronously: without a barrier the clock stops at launch.
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def make_train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, fused: bool = False) -> Callable[[], None]:
    """One training step: zero_grad(set_to_none), forward, loss, backward, AdamW (plain, or as `train`
    builds it with ``fused=True``)."""
    params = [{"params": list(model.parameters())}]
    opt = make_adamw(params, TrainConfig(lr=1e-3)) if fused else torch.optim.AdamW(params, lr=1e-3)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
        opt.step()

    return step


def time_interleaved(
    fns: dict[str, Callable[[], None]],
    device: torch.device,
    repeats: int,
    warmup: int = 3,
    min_seconds: float = 0.05,
    per_block: Optional[int] = None,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Seconds per call of each function (say, one training step each), one block of calls per
    function per repeat, the order reversed on every other repeat, so drift (thermal, a neighbour's
    load) falls on every function alike; on a GPU the clock waits for the kernels. A block is
    ``per_block`` calls, or when None as many as last about ``min_seconds``. Returns the seconds per
    call of every block, per function, and the calls per block. Other processes only ever add time
    to a block, so the fastest block is the least disturbed (the rule of Python's ``timeit``)."""
    if repeats < 1 or warmup < 0 or (per_block is not None and per_block < 1):
        raise ValueError(
            f"need repeats >= 1, warmup >= 0 and per_block >= 1 or None; got {repeats}, {warmup}, {per_block}"
        )
    for fn in fns.values():
        for _ in range(warmup):  # the first calls pay for allocation and kernel selection
            fn()
    _sync(device)
    counts = {}
    for name, fn in fns.items():
        if per_block is not None:
            counts[name] = per_block
            continue
        t0 = time.perf_counter()
        fn()
        _sync(device)
        # Blocks of several calls when one is short, so the clock's resolution and the per-block
        # barrier do not dominate: each block lasts about min_seconds.
        counts[name] = max(1, min(200, math.ceil(min_seconds / max(time.perf_counter() - t0, 1e-9))))
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in names if r % 2 == 0 else reversed(names):
            fn, count = fns[name], counts[name]
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(count):
                fn()
            _sync(device)
            times[name].append((time.perf_counter() - t0) / count)
    return times, counts


def _matmul(device: torch.device) -> tuple[Callable[[], None], int]:
    """A large square float32 matmul, the practical ceiling a training step is compared with: timed in
    the same interleaved loop as the steps, so a neighbour's load or a clock change hits both."""
    n = 8192 if device.type == "cuda" else 1024
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen).to(device) for _ in range(2))
    out = torch.empty(n, n, device=device)
    return (lambda: torch.matmul(a, b, out=out)), n


def _ceiling(n: int, seconds: list[float], per_block: int, threads: Optional[int], label: str) -> dict[str, Any]:
    return {
        "with": label,
        "threads": threads,
        "n": n,
        "flops": 2 * n**3,
        "seconds": seconds,
        "calls_per_block": per_block,
        "flops_per_s": 2 * n**3 / statistics.median(seconds),
    }


def _peak_rss_mib() -> dict[str, Optional[float]]:
    """The process's peak resident set so far (and its largest finished child's), in MiB."""
    try:
        import resource
    except ImportError:  # Windows has no getrusage
        return {"self": None, "children": None}
    # Linux reports KiB, macOS bytes.
    unit = 1.0 if sys.platform == "darwin" else 1024.0
    return {
        "self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit / 2**20,
        "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * unit / 2**20,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _build(kind: str, size: BenchSize, vocab: int) -> nn.Module:
    if kind == "torch":
        return TorchReferenceLM(vocab, size.d_model, size.n_heads, size.n_layers, size.seq)
    norm = "post" if kind == "normlab_post" else "pre"  # normlab and normlab_train: the same pre-LN model
    return TransformerLM(vocab, size.d_model, size.n_heads, size.n_layers, norm=norm, max_seq_len=size.seq)


def _batch(size: BenchSize, vocab: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, vocab, (size.batch, size.seq), generator=gen) for _ in range(2))
    return x.to(device), y.to(device)


def _cuda_peak_mib(kind: str, size: BenchSize, vocab: int, device: torch.device) -> float:
    """Peak memory of training steps of this model alone: weights, gradients, AdamW state, activations."""
    gc.collect()
    torch.cuda.empty_cache()
    x, y = _batch(size, vocab, device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(0)
    step = make_train_step(_build(kind, size, vocab).to(device), x, y)
    for _ in range(3):  # AdamW allocates its state on the first step
        step()
    _sync(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    del step
    gc.collect()
    torch.cuda.empty_cache()
    return peak / 2**20


# --------------------------------------------------------------------------------------------
# The five measurements
# --------------------------------------------------------------------------------------------


def _step_rows(
    name: str,
    threads: Sequence[Optional[int]],
    device: torch.device,
    repeats: int,
    min_seconds: float,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    size, vocab = SIZES[name], VOCAB_SIZE
    x, y = _batch(size, vocab, device)
    memory = {k: _cuda_peak_mib(k, size, vocab, device) for k in STEP_MODELS} if device.type == "cuda" else None
    models = {}
    for kind in STEP_MODELS:
        torch.manual_seed(0)
        models[kind] = _build(kind, size, vocab).to(device)
    steps = {kind: make_train_step(m, x, y, fused=kind == "normlab_train") for kind, m in models.items()}
    matmul, n_mm = _matmul(device)
    tokens = size.batch * size.seq
    flops = step_flops(size.d_model, size.n_layers, size.batch, size.seq, vocab)
    rows = []
    for n in threads:
        if n is not None:
            torch.set_num_threads(n)
        log(f"steps: size {name}, {n or 'n/a'} thread(s)")
        times, per_block = time_interleaved({**steps, "matmul": matmul}, device, repeats, 5, min_seconds)
        peak = _ceiling(n_mm, times.pop("matmul"), per_block.pop("matmul"), n, f"steps {name}")
        per_model = {}
        for kind, seconds in times.items():
            med = statistics.median(seconds)
            per_model[kind] = {
                "seconds": seconds,
                "median_s": med,
                "tokens_per_s": tokens / med,
                "flops_per_s": flops / med,
                "fraction_of_matmul": flops / med / peak["flops_per_s"],
                "params": sum(p.numel() for p in models[kind].parameters()),
            }
        paired = [a / b for a, b in zip(times["torch"], times["normlab"])]  # torch time / normlab time
        rows.append({
            "size": name,
            **asdict(size),
            "threads": n,
            "tokens_per_step": tokens,
            "flops_per_step": flops,
            "steps_per_block": per_block,
            "matmul_flops_per_s": peak["flops_per_s"],
            "matmul": peak,
            "models": per_model,
            "ratio": per_model["normlab"]["tokens_per_s"] / per_model["torch"]["tokens_per_s"],
            "ratio_train_step": per_model["normlab_train"]["tokens_per_s"] / per_model["torch"]["tokens_per_s"],
            "ratio_paired_median": statistics.median(paired),
            "cuda_peak_mib": memory,
            "process_peak_rss_mib": _peak_rss_mib()["self"],
        })  # fmt: skip
    del models, steps, matmul
    gc.collect()
    return rows


def _bench_cost(
    device: torch.device,
    repeats: int,
    min_seconds: float,
    n_threads: Optional[int],
    log: Callable[[str], None],
) -> dict[str, Any]:
    shapes = [(64, n) for n in COST_DEPTHS] + [(d, 4) for d in COST_WIDTHS if (d, 4) != (64, 4)]
    sizes = {(d, n): BenchSize(d, COST_SHAPE["n_heads"], n, COST_SHAPE["batch"], COST_SHAPE["seq"]) for d, n in shapes}
    if n_threads is not None:
        torch.set_num_threads(n_threads)
    log(f"cost against size: {len(sizes)} shapes, {n_threads or 'n/a'} thread(s)")
    steps = {}
    for key, size in sizes.items():
        torch.manual_seed(0)
        x, y = _batch(size, VOCAB_SIZE, device)
        steps[key] = make_train_step(_build("normlab", size, VOCAB_SIZE).to(device), x, y)
    matmul, n_mm = _matmul(device)
    # One interleaved call for the whole grid, so a slow minute hits every shape, not one.
    fns = {**{f"{d}x{n}": fn for (d, n), fn in steps.items()}, "matmul": matmul}
    times, per_block = time_interleaved(fns, device, repeats, warmup=3, min_seconds=min_seconds)
    peak = _ceiling(n_mm, times.pop("matmul"), per_block.pop("matmul"), n_threads, "cost")
    rows = []
    for (d, n), size in sizes.items():
        seconds = times[f"{d}x{n}"]
        med = statistics.median(seconds)
        flops = step_flops(d, n, size.batch, size.seq)
        rows.append({
            "d_model": d, "n_layers": n, **COST_SHAPE, "threads": n_threads, "seconds": seconds, "median_s": med,
            "tokens_per_s": size.batch * size.seq / med, "flops_per_step": flops,
            "fraction_of_matmul": flops / med / peak["flops_per_s"],
        })  # fmt: skip
    del steps, fns, matmul
    gc.collect()
    rows.sort(key=lambda r: (r["d_model"] != 64, r["d_model"], r["n_layers"]))
    return {"rows": rows, "matmul": peak}


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
        from .batched import train_batched  # written separately; absent in older checkouts
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
        _sync(device)
        t0 = time.perf_counter()
        run(model_kwargs, config, corpus=corpus, device=device)
        _sync(device)
        seq_seconds.append(time.perf_counter() - t0)
    per_run = statistics.median(seq_seconds)
    out: dict[str, Any] = {"steps": steps, "sequential_seconds": seq_seconds, "sequential_s_per_run": per_run, "k": {}}
    try:
        train_batched(model_kwargs, [c for _, c in jobs[: min(BATCHED_KS)]], **extra)  # warm-up
        for k in BATCHED_KS:
            log(f"batched: K={k}")
            _sync(device)
            t0 = time.perf_counter()
            train_batched(model_kwargs, [c for _, c in jobs[:k]], **extra)
            _sync(device)
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


def _fmt(value: Optional[float], spec: str = ".3g") -> str:
    return "n/a" if value is None else format(value, spec)


def _cost_ceiling(result: dict[str, Any]) -> float:
    return next(c["flops_per_s"] for c in result["matmul_ceiling"] if c["with"] == "cost")


def format_table(result: dict[str, Any]) -> str:
    """The result of `run_benchmark` as Markdown: a provenance line, then one table per measurement."""
    p = result["provenance"]
    env = ", ".join(f"{k}={v if v is not None else 'unset'}" for k, v in p["env"].items())
    lines = [
        f"{result['device']}; torch {p['torch']}, Python {p['python']}; {env}; "
        f"torch threads {', '.join(str(n) for n in p['threads_used'] if n) or 'n/a'}; "
        f"medians of {result['repeats']} interleaved repeats; normlab {p['normlab']} ({p['revision']}).",
        "",
        "| size (d, blocks, B x T) | threads | normlab tok/s | torch tok/s | model ratio | train step tok/s "
        "| step ratio | % of matmul | matmul GFLOP/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["steps"]:
        m = r["models"]
        lines.append(
            f"| {r['size']} ({r['d_model']}, {r['n_layers']}, {r['batch']} x {r['seq']}) | {r['threads'] or 'n/a'} "
            f"| {m['normlab']['tokens_per_s']:,.0f} | {m['torch']['tokens_per_s']:,.0f} | {r['ratio']:.2f} "
            f"| {m['normlab_train']['tokens_per_s']:,.0f} | {r['ratio_train_step']:.2f} "
            f"| {100 * m['normlab']['fraction_of_matmul']:.0f}% | {r['matmul_flops_per_s'] / 1e9:,.0f} |"
        )
    lines += [
        "",
        "Ratios of tokens/s (> 1: normlab is faster). Model ratio: both with plain `torch.optim.AdamW`, so only "
        "the models differ. Step ratio: normlab's step as `train` takes it (AdamW fused where torch has it, "
        "`make_adamw`) against the PyTorch stack with plain AdamW. % of matmul: normlab's step, its analytic "
        "FLOPs per second (`step_flops`) over a large square float32 matmul's, same run, same threads.",
        "",
        f"Cost against size: normlab pre-LN, {COST_SHAPE['n_heads']} heads, batch {COST_SHAPE['batch']} x seq "
        f"{COST_SHAPE['seq']}, one training step; matmul ceiling {_cost_ceiling(result) / 1e9:,.1f} GFLOP/s.",
        "",
        "| cost: d | layers | threads | ms/step | tok/s | MFLOP/step | % of matmul |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["cost"]:
        lines.append(
            f"| {r['d_model']} | {r['n_layers']} | {r['threads'] or 'n/a'} | {1000 * r['median_s']:.2f} "
            f"| {r['tokens_per_s']:,.0f} | {r['flops_per_step'] / 1e6:,.1f} | {100 * r['fraction_of_matmul']:.1f} |"
        )
    s = result["sweep"]
    lines.append("")
    if "skipped" in s:
        lines.append(f"Sweep: skipped ({s['skipped']}).")
    else:
        lines += [
            "| sweep: workers | runs x steps | seconds | runs/s | speed-up | losses identical |",
            "|---:|---|---:|---:|---:|---|",
        ]
        for w in ("1", "2"):
            med = statistics.median(s["seconds"][w])
            speedup = f"{s['speedup']:.2f}" if w == "2" else "1"
            lines.append(
                f"| {w} | {s['runs']} x {s['steps']} | {med:.2f} | {s['runs_per_s'][w]:.2f} | {speedup} "
                f"| {'yes' if s['losses_identical'] else 'no (max diff ' + _fmt(s['max_abs_loss_diff']) + ')'} |"
            )
    b = result["batched"]
    if b.get("k"):
        lines += [
            "",
            f"| batched: K | seconds | runs/s | sequential s (extrapolated from {len(b['sequential_seconds'])} runs) "
            "| speed-up |",
            "|---:|---:|---:|---:|---:|",
        ]
        for k, r in b["k"].items():
            lines.append(
                f"| {k} | {r['seconds']:.2f} | {r['runs_per_s']:.2f} | {r['sequential_extrapolated_s']:.1f} "
                f"| {r['speedup']:.1f} |"
            )
    if b.get("error"):
        lines.append(f"\nBatched training failed: {b['error']}")
    mem = result["memory"]
    rss = mem["process_peak_rss_mib"]
    lines += ["", f"Peak memory: process peak RSS {_fmt(rss['self'], '.0f')} MiB (the whole process, all sizes), "
              f"largest sweep worker {_fmt(rss['children'], '.0f')} MiB."]  # fmt: skip
    for size, peaks in mem.get("cuda_peak_mib", {}).items():
        lines.append(
            f"CUDA peak allocated, size {size}: " + ", ".join(f"{k} {v:,.1f} MiB" for k, v in (peaks or {}).items())
        )
    return "\n".join(lines)


def _round(obj: Any, digits: int = 5) -> Any:
    """Floats to ``digits`` significant digits, so the stored file stays small and diffs readable."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}") if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _round(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_round(v, digits) for v in obj]
    return obj


def _csv(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            return [kind(part.strip()) for part in text.split(",") if part.strip()]
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"not a comma-separated list: {text!r}") from err

    return parse


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """The command line: measure, print the tables, optionally write the JSON."""
    ap = argparse.ArgumentParser(prog="python -m normlab.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=_csv(str), help=f"comma-separated, of {', '.join(SIZES)} (default ci,cpu; +gpu)")
    ap.add_argument("--threads", type=_csv(int), help="comma-separated torch thread counts (default 1,2)")
    ap.add_argument("--repeats", type=int, help="interleaved repeats per measurement (default 11; 3 with --quick)")
    ap.add_argument("--quick", action="store_true", help="a smoke test: ci size, one thread, a small sweep")
    ap.add_argument("--out", type=Path, help="write every number and its provenance to this JSON file")
    args = ap.parse_args(argv)
    try:
        _resolve_args(args.sizes, args.threads, args.repeats, quick=args.quick, device=get_device())
    except ValueError as err:
        ap.error(str(err))  # a usage error, before minutes of measuring
    result = run_benchmark(
        args.sizes, args.threads, args.repeats, quick=args.quick, log=lambda line: print(line, file=sys.stderr)
    )
    print(format_table(result))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(_round(result), indent=1, allow_nan=False) + "\n")
        print(f"\nwrote {args.out}")
    return result


if __name__ == "__main__":
    main()
