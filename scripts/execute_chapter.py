"""Execute one chapter as the book's build does (nbclient, python3 kernel, in book/) and write the
executed copy: python scripts/execute_chapter.py 07_normformer out/07_normformer.ipynb"""

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

BOOK = Path(__file__).resolve().parent.parent / "book"
sys.path.insert(0, str(BOOK.parent / "_ext"))
import reply_watch  # noqa: E402  (the build's guard against a lost reply, _ext/reply_watch.py)

reply_watch.install()


def execute(path: Path) -> tuple[nbformat.NotebookNode, float]:
    """Execute the notebook at ``path`` (a chapter in book/) as the build does, in book/; returns
    the executed notebook and the wall time in seconds. scripts/measure_costs.py times with it."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    # The kernel runs in book/, as in the build, given relative to the repository root.
    os.chdir(BOOK.parent)
    NotebookClient(nb, timeout=3600, kernel_name="python3", resources={"metadata": {"path": "book"}}).execute()
    return nb, time.perf_counter() - start


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/execute_chapter.py <chapter, e.g. 07_normformer> <output .ipynb>")
    chapter, out = sys.argv[1], Path(sys.argv[2]).resolve()
    path = BOOK / f"{chapter}.ipynb"
    if not path.exists():
        choices = ", ".join(sorted(p.stem for p in BOOK.glob("*.ipynb")))
        sys.exit(f"no chapter {chapter!r}; valid choices: {choices}")
    nb, seconds = execute(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    print(f"{chapter}: executed in {seconds:.0f} s, written to {out}", flush=True)


if __name__ == "__main__":
    main()
