"""How much a stored board's early check moves between machines that round differently: the tolerance of
`normlab.replay`, measured. Writes book/_data/board-spread.json.

    OMP_NUM_THREADS=1 python scripts/board_spread.py [--python /path/to/other/python ...]

It takes up to 8 runs of every shipped board (the first at each of its learning rates and of each of its
models), computes each run's float64 fingerprint (`normlab.replay.fingerprint`, here for 10 steps, more
than the check's) and, for comparison, its float32 losses over the same steps, once per environment: this
machine's default kernels; ATen, MKL and oneDNN limited to AVX2; no vector kernels at all (ATen's
"default", MKL's SSE4.2, oneDNN's SSE4.1); two torch threads; and each --python given (PyPI's CUDA torch
wheel on another Python, run on the CPU). It records, per step, the largest relative difference from the
first environment, and the largest at the check's steps, beside `normlab.replay.TOLERANCE`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = 10
KERNELS = {
    "default kernels": {},
    "AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "no vector kernels": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    },  # fmt: skip
    "two torch threads": {"OMP_NUM_THREADS": "2"},
}


def sample() -> list[tuple[str, int]]:
    """(board file, run index): per board, the first run at each learning rate and of each model, up to 8."""
    from normlab.replay import board_path
    from normlab.results import load_results

    picked = []
    for path in sorted(board_path("x", "ci").parent.glob("*.json.xz")):
        results, _ = load_results(path)
        first = {}
        for i, r in enumerate(results):
            first.setdefault(("lr", r.config["lr"]), i)
            first.setdefault(("model", json.dumps(r.model, sort_keys=True, default=str)), i)
        picked += [(path.name, i) for i in sorted(set(first.values()))[:8]]
    return picked


def measure(out: str) -> None:
    """In this process: every sampled run's float64 fingerprint and float32 losses, to ``out``."""
    import dataclasses

    import torch

    import normlab
    from normlab.replay import EARLY_WINDOWS, board_path, job_of
    from normlab.results import load_results

    corpus, rows, boards = normlab.load_corpus(), {}, {}
    for name, i in sample():
        if name not in boards:
            boards[name] = load_results(board_path("x", "ci").parent / name, corpus)[0]
        model, config = job_of(boards[name][i])
        config = dataclasses.replace(config, eval_windows=EARLY_WINDOWS)
        row = {"lr": config.lr}
        for label, dtype in (("float64", torch.float64), ("float32", torch.float32)):
            r = normlab.run(model, config, corpus=corpus, device=torch.device("cpu"), stop_after=STEPS, dtype=dtype)
            row[label] = [r.initial_val, *r.losses]
        rows[f"{name}#{i}"] = row
    env = {"python": platform.python_version(), "torch": torch.__version__,
           "capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}  # fmt: skip
    Path(out).write_text(json.dumps({"env": env, "runs": rows}))


def spread(ref: dict, other: dict, key: str) -> list[float]:
    """Per position (0: the initial loss, k: step k), the largest relative difference over the runs."""
    worst = [0.0] * (STEPS + 1)
    for run, row in ref.items():
        for k, (a, b) in enumerate(zip(row[key], other[run][key])):
            worst[k] = max(worst[k], abs(a - b) / abs(a))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", nargs="*", default=[], help="other Pythons with torch and normlab's deps")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # internal: one environment's measurement
    parser.add_argument("--out", type=Path, default=ROOT / "book" / "_data" / "board-spread.json")
    args = parser.parse_args()
    if args.measure:
        return measure(args.measure)
    from normlab.replay import EARLY_STEPS, TOLERANCE

    envs = [(label, sys.executable, env) for label, env in KERNELS.items()]
    envs += [(f"{p} (default kernels)", p, {"PYTHONPATH": str(ROOT / "code" / "src")}) for p in args.python]
    measured, start = {}, time.time()
    for label, python, env in envs:
        tmp = args.out.with_suffix(f".{len(measured)}.tmp")
        base = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS",
                                                                   "ONEDNN_MAX_CPU_ISA")}  # fmt: skip
        subprocess.run([python, __file__, "--measure", str(tmp)], env={"OMP_NUM_THREADS": "1", **base, **env},
                       check=True)  # fmt: skip
        measured[label] = json.loads(tmp.read_text())
        tmp.unlink()
        print(f"board_spread: {label}: {len(measured[label]['runs'])} runs, {time.time() - start:.0f} s", flush=True)
    (ref_label, ref), *others = measured.items()
    table = {label: {"env": m["env"], **{key: spread(ref["runs"], m["runs"], key) for key in ("float64", "float32")}}
             for label, m in others}  # fmt: skip
    check = max(max(t["float64"][: EARLY_STEPS + 1]) for t in table.values())
    out = {"reference": {"label": ref_label, **ref["env"]}, "runs": len(ref["runs"]), "steps": STEPS,
           "check_steps": EARLY_STEPS, "tolerance": TOLERANCE, "largest_at_check_steps": check,
           "spread": table, "command": " ".join(["python", "scripts/board_spread.py", *sys.argv[1:]]),
           "date": time.strftime("%Y-%m-%d")}  # fmt: skip
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"board_spread: largest relative difference at the check's {EARLY_STEPS} steps: {check:.1e} "
          f"(tolerance {TOLERANCE:.0e})")  # fmt: skip


if __name__ == "__main__":
    main()
