"""What the step benchmark times: the sizes, a training step of normlab against PyTorch's layer
stack, the matmul ceiling, cost against depth and width, peak memory.
"""

from __future__ import annotations

import gc
import platform
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
from torch import nn

from ..data import VOCAB_SIZE
from ..model import TransformerLM
from ..reference import TorchReferenceLM, step_flops
from ..timing import make_train_step, sync, time_interleaved


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
# normlab's pre-LN model and PyTorch's layer stack, each stepped with plain AdamW and with AdamW as
# `train` builds it (fused into one kernel where torch has one: `make_adamw`), so every ratio compares
# like with like and the optimizer's gain is its own number; and post-LN normlab, plain AdamW.
STEP_MODELS = ("normlab", "torch", "normlab_fused", "torch_fused", "normlab_post")
FUSED = ("normlab_fused", "torch_fused")


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
    if kind in ("torch", "torch_fused"):
        return TorchReferenceLM(vocab, size.d_model, size.n_heads, size.n_layers, size.seq)
    norm = "post" if kind == "normlab_post" else "pre"  # normlab and normlab_fused: the same pre-LN model
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
    step = make_train_step(_build(kind, size, vocab).to(device), x, y, fused=kind in FUSED)
    for _ in range(3):  # AdamW allocates its state on the first step
        step()
    sync(device)
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
    steps = {kind: make_train_step(m, x, y, fused=kind in FUSED) for kind, m in models.items()}
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

        tok = {kind: row["tokens_per_s"] for kind, row in per_model.items()}
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
            "ratio": tok["normlab"] / tok["torch"],  # the headline: the same plain AdamW on both sides
            "ratio_fused": tok["normlab_fused"] / tok["torch_fused"],  # the same fused AdamW on both sides
            "fused_gain": {kind: tok[f"{kind}_fused"] / tok[kind] for kind in ("normlab", "torch")},
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
