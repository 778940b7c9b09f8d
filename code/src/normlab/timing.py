"""The interleaved step timer the chapters and the benchmark use: blocks of calls per function,
the order reversed every other repeat, a barrier on accelerators; and one training step to time.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .training import TrainConfig, make_adamw

__all__ = ["make_train_step", "time_interleaved", "sync", "CLOCKS"]

CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "thread": time.thread_time}


def sync(device: torch.device) -> None:
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
    clock: str = "wall",
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Seconds per call of each function (say, one training step each), one block of calls per
    function per repeat, the order reversed on every other repeat, so drift (thermal, a neighbour's
    load) falls on every function alike; on a GPU the clock waits for the kernels. A block is
    ``per_block`` calls, or when None as many as last about ``min_seconds``. Returns the seconds per
    call of every block, per function, and the calls per block. Other processes only ever add time
    to a block, so the fastest block is the least disturbed (the rule of Python's ``timeit``).

    ``clock="wall"`` times with ``time.perf_counter``; ``clock="thread"`` with ``time.thread_time``,
    the CPU time of the calling thread, which does not run while the scheduler hands the core to
    another process: on a busy machine it measures the work, where the wall clock measures the
    queue. It counts no other thread, so it needs the CPU and one torch thread."""
    if clock not in CLOCKS:
        raise ValueError(f"unknown clock {clock!r}; valid choices: {', '.join(CLOCKS)}")
    if clock == "thread" and (device.type != "cpu" or torch.get_num_threads() != 1):
        raise ValueError(
            "clock='thread' counts only the calling thread's CPU time: use it on the CPU with one torch "
            f"thread (device {device.type}, torch.get_num_threads() = {torch.get_num_threads()})"
        )
    now = CLOCKS[clock]
    if repeats < 1 or warmup < 0 or (per_block is not None and per_block < 1):
        raise ValueError(
            f"need repeats >= 1, warmup >= 0 and per_block >= 1 or None; got {repeats}, {warmup}, {per_block}"
        )
    for fn in fns.values():
        for _ in range(warmup):  # the first calls pay for allocation and kernel selection
            fn()
    sync(device)
    counts = {}
    for name, fn in fns.items():
        if per_block is not None:
            counts[name] = per_block
            continue
        t0 = time.perf_counter()
        fn()
        sync(device)
        # Blocks of several calls when one is short, so the clock's resolution and the per-block
        # barrier do not dominate: each block lasts about min_seconds.
        counts[name] = max(1, min(200, math.ceil(min_seconds / max(time.perf_counter() - t0, 1e-9))))
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in names if r % 2 == 0 else reversed(names):
            fn, count = fns[name], counts[name]
            sync(device)
            t0 = now()
            for _ in range(count):
                fn()
            sync(device)
            times[name].append((now() - t0) / count)
    return times, counts
