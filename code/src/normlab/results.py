"""Results with their provenance: strict JSON files that say what produced them (configuration,
code and torch versions, device, threads, data), written atomically and read back with checks.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import lzma
import math
import platform
import subprocess
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch

from .data import Corpus, load_corpus
from .model import model_kwargs_from_json, model_kwargs_to_json
from .record import TrainResult
from .scale import get_device, get_scale, seed_base
from .store import atomic_write_bytes
from .sweep import SweepError, default_workers, run_many
from .training import lr_multiplier

# run_many, default_workers and SweepError live in normlab.sweep; they are named here too because
# the chapters and stored commands call them as normlab.results.run_many.
__all__ = ["run_many", "default_workers", "SweepError", "provenance", "save_results", "load_results", "encode_model"]


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


def provenance(corpus: Optional[Corpus] = None, *, threads: Optional[int] = None) -> dict[str, Any]:
    """Where a result came from: scale, seed base, device, the torch threads the runs trained on
    (``threads``, default this process's), versions, code revision (and ``dirty``: whether normlab's
    own source had uncommitted changes), normlab's source hash, corpus fingerprint and split, date."""
    from . import __version__
    from .store import source_hash

    revision = _git("rev-parse", "--short", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".") if revision else None
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "scale": get_scale(),
        "seed_base": seed_base(),
        "device": _device_name(),
        "torch_threads": torch.get_num_threads() if threads is None else threads,
        "normlab": __version__,
        "revision": revision or "not a git checkout",
        "dirty": bool(status) if revision else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "normlab_source": source_hash()[:16],
        "corpus_sha256": corpus.fingerprint[:12] if corpus is not None else None,
        "corpus_val_fraction": corpus.val_fraction if corpus is not None else None,
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


def encode_model(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Model kwargs as JSON values: a Placement (or a per-block list of them and names) as its fields."""
    return model_kwargs_to_json(kwargs)


# A stored board's early fingerprints (`normlab.replay`) are compared to 1e-9: kept whole, never rounded.
EXACT_META = ("early",)


def results_json(results: Sequence[TrainResult], meta: dict[str, Any], *, digits: Optional[int] = 5) -> str:
    """What `save_results` writes, as text."""
    rows = []
    for r in results:
        # The per-step learning rates follow from the config: `load_results` recomputes them.
        row = {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name not in ("trained_model", "lrs")}
        row["model"] = encode_model(r.model)
        rows.append(row)
    payload = _round({"meta": {k: v for k, v in meta.items() if k not in EXACT_META}, "results": rows}, digits)
    payload["meta"].update({k: _round(v, None) for k, v in meta.items() if k in EXACT_META})
    return json.dumps(payload, separators=(",", ":"), allow_nan=False) + "\n"


def save_results(
    path: Union[str, Path], results: Sequence[TrainResult], meta: dict[str, Any], *, digits: Optional[int] = 5
) -> None:
    """Write ``results`` and ``meta`` (e.g. ``{"provenance": provenance(corpus), "grid": ...}``) as
    strict JSON, floats to ``digits`` significant digits (None: exact), without the per-step learning
    rates (the config gives them); `load_results` gives back equal results. The file is written
    whole or not at all (`normlab.store.atomic_write_bytes`), xz-compressed when ``path`` ends in
    ``.xz`` (the boards that ship inside normlab)."""
    data = results_json(results, meta, digits=digits).encode()
    atomic_write_bytes(path, lzma.compress(data, preset=9) if str(path).endswith(".xz") else data)


def load_results(
    path: Union[str, Path], corpus: Optional[Corpus] = None, *, check_corpus: bool = True
) -> tuple[list[TrainResult], dict[str, Any]]:
    """Read what `save_results` wrote: the results and their metadata. With ``check_corpus`` (the
    default) the stored corpus fingerprint must match ``corpus`` (default: the shipped corpus), so
    results trained on other data are never read as if they were ours. A file that is not a
    results file is a ValueError that says what is wrong with it."""
    path = Path(path)
    try:
        payload = json.loads(lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_text())
    except (json.JSONDecodeError, lzma.LZMAError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not a normlab results file: not JSON ({error})") from error
    if not (isinstance(payload, dict) and isinstance(payload.get("meta"), dict)
            and isinstance(payload.get("results"), list)):  # fmt: skip
        raise ValueError(f"{path} is not a normlab results file: it needs a 'meta' object and a 'results' list")
    meta = payload["meta"]
    stored = meta.get("provenance", {}).get("corpus_sha256")
    if check_corpus:
        live = (corpus or load_corpus()).fingerprint[:12]
        if stored != live:
            raise ValueError(
                f"{path} was trained on corpus {stored}, not on this corpus ({live}); "
                "rerun it, or pass check_corpus=False to read it anyway"
            )
    names = {f.name for f in dataclasses.fields(TrainResult)}
    results = []
    for n, r in enumerate(payload["results"]):
        try:
            unknown = set(r) - names
            if unknown:
                raise ValueError(f"unknown fields {sorted(unknown)}")
            r["evals"] = [tuple(e) for e in r["evals"]]
            r["model"] = model_kwargs_from_json(r["model"])
            r["config"]["betas"] = tuple(r["config"]["betas"])
            c = r["config"]
            r["lrs"] = [
                c["lr"] * lr_multiplier(c["schedule"], step, warmup=c["warmup"], total=c["steps"],
                                        min_ratio=c["min_lr_ratio"], decay_fraction=c.get("decay_fraction", 0.2))
                for step in range(1, len(r["losses"]) + 1)
            ]  # fmt: skip
            results.append(TrainResult(**r))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(f"{path} is not a normlab results file: result {n} is malformed ({error!r})") from error
    return results, meta
