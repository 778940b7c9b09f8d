"""nbval runs every chapter; this hands each fully passing run to the book's execution
cache, so the strict build that follows shows those outputs instead of running it again.

The cache is the one the build reads for this scale and seed base (see the book
extension, `_ext/normlab_book.py`), keyed by the notebook's code as jupyter-cache keys
it: edit a cell and the build executes that chapter again. A chapter with a failing,
skipped or timed-out cell is not cached, so the build runs it (and fails too).
"""

from __future__ import annotations

import fcntl
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))

_runs: dict[str, dict] = {}  # notebook path -> {"start", "outputs", "ok"}


def _notebook(item: pytest.Item) -> str | None:
    path = str(getattr(item, "fspath", ""))
    return path if path.endswith(".ipynb") and hasattr(item, "test_outputs") else None


def pytest_runtest_setup(item: pytest.Item) -> None:
    path = _notebook(item)
    if path is not None and path not in _runs:
        _runs[path] = {"start": time.perf_counter(), "outputs": {}, "ok": True}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::")[0]
    for key, run in _runs.items():
        if key.endswith(path) and (report.failed or report.skipped):
            run["ok"] = False


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    path = _notebook(item)
    if path is None:
        return
    run = _runs[path]
    run["outputs"][item.cell_num] = item.test_outputs
    if nextitem is None or str(getattr(nextitem, "fspath", "")) != path:
        if run["ok"]:
            _cache(Path(path), run["outputs"], time.perf_counter() - run["start"])
        del _runs[path]


def _cache(path: Path, outputs: dict[int, list], seconds: float) -> None:
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from normlab_book import cache_dir

    nb = nbformat.read(str(path), as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    if len(outputs) != len(code) or any(outs is None for outs in outputs.values()):
        return  # not every cell ran to the end
    for count, cell in enumerate(code, start=1):
        cell.execution_count = count
        cell.outputs = [nbformat.from_dict(dict(out)) for out in outputs[count - 1]]
        for out in cell.outputs:
            if out.output_type == "execute_result":
                out.execution_count = count
    where = cache_dir(ROOT / "_build" / ".jupyter_cache")
    where.mkdir(parents=True, exist_ok=True)
    bundle = CacheBundleIn(nb, str(path.resolve()), data={"execution_seconds": seconds})
    # pytest-xdist runs two chapters at once: one writer at a time on the cache's
    # SQLite database.
    with open(where.parent / f".{where.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cache = get_cache(str(where))
        cache.cache_notebook_bundle(bundle, check_validity=False, overwrite=True)
