"""Run many training jobs and keep their results in a small JSON file with their provenance, so a
stored result always says what produced it: configuration, code and torch versions, device, date.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import platform
import subprocess
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch
from tqdm.auto import tqdm

from .data import Corpus, load_corpus
from .scale import get_device, get_scale
from .train import TrainConfig, TrainResult, run, show_progress

__all__ = ["run_many", "provenance", "save_results", "load_results"]


def run_many(
    jobs: Sequence[tuple[dict[str, Any], TrainConfig]],
    *,
    corpus: Optional[Corpus] = None,
    progress: Optional[bool] = None,
    desc: str = "runs",
) -> list[TrainResult]:
    """`run` every (model kwargs, config) pair in order, with one progress bar for the lot."""
    corpus = corpus or load_corpus()
    show = show_progress() if progress is None else progress
    return [run(m, c, corpus=corpus, progress=False) for m, c in tqdm(jobs, desc=desc, disable=not show, leave=False)]


def _revision() -> str:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or "not a git checkout"
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"


def provenance(corpus: Optional[Corpus] = None) -> dict[str, Any]:
    """Where a result came from: scale, device, versions, code revision, corpus fingerprint, date."""
    from . import __version__

    device = get_device()
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else f"{platform.machine()} CPU"
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "scale": get_scale(),
        "device": name,
        "torch_threads": torch.get_num_threads(),
        "normlab": __version__,
        "revision": _revision(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "corpus_sha256": corpus.fingerprint[:12] if corpus is not None else None,
    }


def _round(obj: Any, digits: int = 5) -> Any:
    """Floats to ``digits`` significant digits: a stored grid stays small and diffs stay readable."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _round(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_round(v, digits) for v in obj]
    return obj


def save_results(path: Union[str, Path], results: Sequence[TrainResult], meta: dict[str, Any]) -> None:
    """Write ``results`` and ``meta`` (e.g. ``{"provenance": provenance(), "grid": ...}``) as JSON,
    floats to 5 significant digits, per-step learning rates left out (the config gives them)."""
    rows = [{k: v for k, v in dataclasses.asdict(r).items() if k != "lrs"} for r in results]
    payload = _round({"meta": meta, "results": rows})
    Path(path).write_text(json.dumps(payload, separators=(",", ":"), default=float) + "\n")


def load_results(path: Union[str, Path]) -> tuple[list[TrainResult], dict[str, Any]]:
    """Read what `save_results` wrote: the results and their metadata."""
    payload = json.loads(Path(path).read_text())
    results = []
    for r in payload["results"]:
        r["evals"] = [tuple(e) for e in r["evals"]]
        results.append(TrainResult(**r))
    return results, payload["meta"]
