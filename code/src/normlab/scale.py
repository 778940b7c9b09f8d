"""The one scale switch (NORMLAB_SCALE = ci | cpu | gpu) and the device choice, read in one place.

Each experiment declares its sizes per scale with `PerScale`; notebooks never edit sizes by hand.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Generic, Optional, TypeVar

import torch

__all__ = ["SCALES", "get_device", "get_scale", "seed_base", "seeds", "PerScale", "describe_environment"]

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
    """The scale to run at: the argument, else $NORMLAB_SCALE, else gpu on a GPU and cpu otherwise."""
    if scale is None:
        scale = os.environ.get("NORMLAB_SCALE", "").strip().lower() or None
    if scale is None:
        return "gpu" if get_device().type == "cuda" else "cpu"
    if scale not in SCALES:
        raise ValueError(
            f"unknown scale {scale!r} (from NORMLAB_SCALE or an argument); valid choices: {', '.join(SCALES)}"
        )
    return scale


def seed_base() -> int:
    """$NORMLAB_SEED_BASE (default 0): the shift `seeds` applies."""
    base = os.environ.get("NORMLAB_SEED_BASE", "0").strip() or "0"
    if not base.isdigit():
        raise ValueError(f"NORMLAB_SEED_BASE must be a non-negative integer, got {base!r}")
    return int(base)


def seeds(n: int) -> range:
    """The ``n`` seeds an experiment runs: 0 .. n-1, shifted by $NORMLAB_SEED_BASE when set, so a
    chapter's claims can be re-checked on fresh seeds without editing it."""
    base = seed_base()
    return range(base, base + n)


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
    line = f"normlab: device={device.type}, scale={scale}, torch {torch.__version__}, {threads} CPU threads"
    if device.type == "cpu" and "google.colab" in sys.modules:
        line += "\n  tip: Runtime > Change runtime type > GPU runs this chapter at the gpu scale."
    return line
