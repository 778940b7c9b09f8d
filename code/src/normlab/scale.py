"""The one scale switch (NORMLAB_SCALE = ci | cpu | gpu) and the device choice, read in one place.

Each experiment declares its sizes per scale with `PerScale`; notebooks never edit sizes by hand.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from typing import Generic, Optional, TypeVar

import torch

__all__ = [
    "SCALES",
    "get_device",
    "get_scale",
    "seed_base",
    "seeds",
    "configure_threads",
    "PerScale",
    "describe_environment",
]

SCALES = ("ci", "cpu", "gpu")
T = TypeVar("T")


def get_device() -> torch.device:
    """cuda if present, then Apple's mps, then the cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def get_scale(scale: Optional[str] = None) -> str:
    """The scale to run at: the argument, else $NORMLAB_SCALE, else gpu on a GPU and cpu otherwise.

    The name must be exactly one of `SCALES` ("GPU " is an error, not gpu); the gpu scale on a
    machine without CUDA is allowed (a check of the sizes, say) but warns: it takes hours there."""
    source = "the argument"
    if scale is None:
        raw = os.environ.get("NORMLAB_SCALE")
        if raw is None or raw == "":
            return "gpu" if get_device().type == "cuda" else "cpu"
        scale, source = raw, "NORMLAB_SCALE"
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r} (from {source}); valid choices: {', '.join(SCALES)}")
    if scale == "gpu" and source == "NORMLAB_SCALE" and get_device().type != "cuda" and not _WARNED:
        _WARNED.append(scale)
        warnings.warn(
            f"the gpu scale was asked for ({source}) but there is no CUDA GPU here (device {get_device().type}): "
            "the chapters will run their gpu sizes on this device, which takes hours; NORMLAB_SCALE=cpu fits it",
            stacklevel=2,
        )
    return scale


_WARNED: list[str] = []


def seed_base() -> int:
    """$NORMLAB_SEED_BASE (default 0): the shift `seeds` applies."""
    base = os.environ.get("NORMLAB_SEED_BASE", "0").strip() or "0"
    if not base.isdigit():
        raise ValueError(f"NORMLAB_SEED_BASE must be a non-negative integer, got {base!r}")
    return int(base)


def seeds(n: int) -> range:
    """The ``n`` seeds an experiment runs: 0 .. n-1, shifted by $NORMLAB_SEED_BASE when set, so a
    chapter's claims can be re-checked on fresh seeds without editing it."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"seeds(n) needs a number of seeds n >= 1, got {n!r}")
    base = seed_base()
    return range(base, base + n)


def configure_threads() -> int:
    """Set torch's CPU thread count deliberately, once, when normlab is imported (a notebook
    kernel included), and return it: $OMP_NUM_THREADS when it is set (torch has read it already),
    else $NORMLAB_THREADS, else 1.

    One, because on the 2-core machines this book is built on a second torch thread made a training
    step only 1.06x faster on an idle machine, while with one other busy process the default two
    spin-waiting OpenMP threads made in-kernel chapters 8-11x slower. Sweeps run one thread per worker.
    """
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return torch.get_num_threads()
    raw = os.environ.get("NORMLAB_THREADS", "1").strip() or "1"
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"NORMLAB_THREADS must be a positive integer, got {raw!r}")
    torch.set_num_threads(int(raw))
    return int(raw)


@dataclass(frozen=True)
class PerScale(Generic[T]):
    """One value per scale, e.g. ``PerScale(ci=2, cpu=6, gpu=24)``; ``.get()`` picks the current one."""

    ci: T
    cpu: T
    gpu: T

    def get(self, scale: Optional[str] = None) -> T:
        return getattr(self, get_scale(scale))


def describe_environment() -> str:
    """One line for a chapter's first cell: device, scale, torch, and a hint when no GPU is present."""
    device, scale = get_device(), get_scale()
    threads = torch.get_num_threads()
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        why = "from OMP_NUM_THREADS"
    elif os.environ.get("NORMLAB_THREADS", "").strip():
        why = "from NORMLAB_THREADS"
    else:
        why = "normlab's default; NORMLAB_THREADS=n changes it"
    line = (
        f"normlab: device={device.type}, scale={scale}, torch {torch.__version__}, "
        f"{threads} torch CPU thread(s) in this kernel ({why}), sweeps on one thread per worker"
    )
    if device.type == "cpu" and "google.colab" in sys.modules:
        line += "\n  tip: Runtime > Change runtime type > GPU runs this chapter at the gpu scale."
    return line
