"""Run many training jobs and keep their results in a small JSON file with their provenance, so a
stored result always says what produced it: configuration, code and torch versions, device, data.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import platform
import subprocess
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch
from tqdm.auto import tqdm

from .data import Corpus, load_corpus
from .model import Placement
from .scale import get_device, get_scale, seed_base
from .train import Probe, TrainConfig, TrainResult, lr_multiplier, run

__all__ = ["run_many", "provenance", "save_results", "load_results"]


def run_many(
    jobs: Sequence[tuple[dict[str, Any], TrainConfig]],
    *,
    corpus: Optional[Corpus] = None,
    progress: bool = False,
    desc: str = "runs",
    final_probe: Optional[Probe] = None,
) -> list[TrainResult]:
    """`run` every (model kwargs, config) pair in order; ``progress=True`` shows one bar for the lot;
    ``final_probe`` is passed to every `run`."""
    corpus = corpus or load_corpus()
    jobs = tqdm(jobs, desc=desc, disable=not progress, leave=False)
    return [run(m, c, corpus=corpus, final_probe=final_probe) for m, c in jobs]


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


def _round(obj: Any, digits: int = 5) -> Any:
    """Floats to ``digits`` significant digits (a stored grid stays small and diffs stay readable);
    a value that is not a finite number becomes null, so the file is strict JSON."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}") if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _round(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_round(v, digits) for v in obj]
    return obj


def _encode_model(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: {"Placement": dataclasses.asdict(v)} if isinstance(v, Placement) else v for k, v in kwargs.items()}


def _decode_model(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        k: Placement(**v["Placement"]) if isinstance(v, dict) and set(v) == {"Placement"} else v
        for k, v in kwargs.items()
    }


def save_results(path: Union[str, Path], results: Sequence[TrainResult], meta: dict[str, Any]) -> None:
    """Write ``results`` and ``meta`` (e.g. ``{"provenance": provenance(corpus), "grid": ...}``) as
    strict JSON, floats to 5 significant digits, without the per-step learning rates (the config
    gives them); `load_results` gives back equal results."""
    rows = []
    for r in results:
        # The per-step learning rates follow from the config: `load_results` recomputes them.
        row = {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name not in ("trained_model", "lrs")}
        row["model"] = _encode_model(r.model)
        rows.append(row)
    payload = _round({"meta": meta, "results": rows})
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
