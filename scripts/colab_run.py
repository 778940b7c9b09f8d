"""Chapters executed as Colab runs them: each chapter's Colab edition (colab/book/, what the Colab button opens)
alone in an empty folder, normlab installed from a wheel of code/ (not editable), `google.colab` importable so
the first cell takes its Colab branch, and myst-nb not (Colab has none: the glued values print).

    python scripts/colab_run.py [--python PY] [--scale ci] [--until-board] [--repeat N] [chapter ...]

Without --python, a fresh virtual environment that sees this one's packages (torch, Jupyter) gets the
wheel; with it (say a Python 3.12 with PyPI's CUDA torch wheel and ipywidgets 7.7.1, as on Colab), the
wheel is installed there. --until-board stops a chapter after its first stored-board cell. Plain nbclient
executes each chapter (none of the book build's guards), under a wall-clock limit per chapter. The tests
(tests/test_colab_run.py) call `prepare` and `run_chapter`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOARD_CELL = ("normlab.stored_sweep(", "board_replay.replay(")  # what a chapter's first stored-board cell calls

# Run by the target Python: execute one notebook cell by cell, stopping after the first board cell when
# asked, and print one JSON line per cell (its index, seconds, whether it errored, its text output, the head
# and tail of a long one: a board's line comes first, its table after).
DRIVER = r"""
import json, sys, time
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

path, until_board, marks, timeout = sys.argv[1], sys.argv[2] == "1", json.loads(sys.argv[3]), int(sys.argv[4])
nb = nbformat.read(path, as_version=4)
client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": "."}})
with client.setup_kernel():
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        start, failed = time.perf_counter(), None
        try:
            client.execute_cell(cell, index)
        except CellExecutionError as error:
            failed = str(error).strip().splitlines()[-1][:300]
        text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        if len(text) > 6000:
            text = text[:3000] + "\n...\n" + text[-3000:]
        row = {"cell": index, "seconds": round(time.perf_counter() - start, 1), "error": failed, "text": text}
        print(json.dumps(row), flush=True)
        if failed or (until_board and any(m in cell.source for m in marks)):
            break
nbformat.write(nb, path)
"""


def build_wheel(out: Path) -> Path:
    """A wheel of code/, built from a copy (the source tree gets no build/ folder), without the network."""
    src = out / "src"
    shutil.copytree(ROOT / "code", src, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src),
                    "-w", str(out)], check=True)  # fmt: skip
    return next(out.glob("normlab-*.whl"))


def prepare(workdir: Path, python: str | None = None) -> Path:
    """A Python with normlab installed from a fresh wheel (in a new virtual environment that sees this
    one's packages, unless ``python`` is given), and a fake `google.colab` beside it; returns the Python."""
    wheel = build_wheel(workdir / "wheel")
    if python is None:
        venv.create(workdir / "env", with_pip=True, system_site_packages=True)
        python = str(workdir / "env" / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)], check=True)
    fake = workdir / "colab"  # a namespace `google` (no __init__.py): protobuf's google.* still imports
    (fake / "google" / "colab").mkdir(parents=True, exist_ok=True)
    (fake / "google" / "colab" / "__init__.py").write_text(
        '"""Stands in for Colab: the chapters test sys.modules."""\n'
    )
    (fake / "sitecustomize.py").write_text(
        "import sys\n\nimport google.colab  # noqa: F401\n\nsys.modules['myst_nb'] = None  # not on Colab\n"
    )
    return Path(python)


def run_chapter(python: Path, workdir: Path, chapter: str, *, scale: str = "ci", until_board: bool = False,
                timeout: int = 900, env: dict | None = None) -> dict:  # fmt: skip
    """Execute ``chapter`` alone in an empty folder under ``workdir``; its cells' rows, the wall time and
    whether it finished, ran out of time or failed."""
    folder = Path(tempfile.mkdtemp(prefix=f"{chapter}-", dir=workdir))
    shutil.copy(ROOT / "colab" / "book" / f"{chapter}.ipynb", folder)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NORMLAB_", "PYTHONPATH", "JPY_"))}
    env = {**base, "NORMLAB_SCALE": scale, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(workdir / "colab"), **(env or {})}
    start = time.time()
    try:
        out = subprocess.run([str(python), "-c", DRIVER, f"{chapter}.ipynb", "1" if until_board else "0",
                              json.dumps(BOARD_CELL), str(timeout)], cwd=folder, env=env, capture_output=True,
                             text=True, timeout=timeout)  # fmt: skip
        status = "finished" if out.returncode == 0 else "failed"
        stdout, stderr = out.stdout, out.stderr
    except subprocess.TimeoutExpired as expired:
        status, stdout, stderr = "timed out", expired.stdout or "", expired.stderr or ""
        stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
        stderr = stderr.decode() if isinstance(stderr, bytes) else stderr
    cells = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if any(c["error"] for c in cells):
        status = "failed"
    return {"chapter": chapter, "status": status, "seconds": round(time.time() - start, 1), "cells": cells,
            "stderr": stderr[-3000:], "folder": str(folder)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="default: every chapter")
    parser.add_argument("--python", help="a Python to install the wheel into (default: a new virtual environment)")
    parser.add_argument("--scale", default="ci", choices=("ci", "cpu", "gpu"))
    parser.add_argument("--until-board", action="store_true", help="stop after a chapter's first stored-board cell")
    parser.add_argument("--repeat", type=int, default=1, help="run each chapter this many times")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per chapter")
    parser.add_argument("--workdir", type=Path, help="default: a new temporary folder")
    args = parser.parse_args()
    chapters = args.chapters or sorted(p.stem for p in (ROOT / "book").glob("*.ipynb"))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="colab-run-"))
    workdir.mkdir(parents=True, exist_ok=True)
    python = prepare(workdir, args.python)
    failed = 0
    for chapter in chapters:
        for n in range(args.repeat):
            r = run_chapter(python, workdir, chapter, scale=args.scale, until_board=args.until_board,
                            timeout=args.timeout)  # fmt: skip
            boards = [line for c in r["cells"] for line in c["text"].splitlines() if "confirmed" in line]
            last = r["cells"][-1]["cell"] if r["cells"] else None
            print(f"{chapter} run {n + 1}: {r['status']} in {r['seconds']:.0f} s (last cell {last}); "
                  f"{boards[0].strip()[:150] if boards else 'no board line'}", flush=True)  # fmt: skip
            if r["status"] != "finished":
                failed += 1
                print(r["stderr"][-1500:] or "\n".join(str(c) for c in r["cells"][-2:]), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
