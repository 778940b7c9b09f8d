"""The standard first code cell of every chapter, built from the repository URL in _config.yml.

python scripts/setup_cell.py          # check every notebook under book/ (exit 1 on a mismatch)
python scripts/setup_cell.py --write  # rewrite the first code cell of every notebook
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]

TEMPLATE = """\
# Setup. On Colab (and only there) install normlab from the repository, once per runtime;
# torch and ipywidgets stay as Colab ships them. Elsewhere, see the README's set-up.
import sys
from importlib.util import find_spec

if "google.colab" in sys.modules and find_spec("normlab") is None:
    %pip install -q "normlab @ git+{url}@{branch}#subdirectory=code"

import normlab

print(normlab.describe_environment())"""


def repository() -> tuple[str, str]:
    text = (ROOT / "_config.yml").read_text()
    block = re.search(r"^repository:\n((?:[ \t]+.*\n)+)", text, re.M)
    if block is None:
        raise SystemExit("_config.yml has no repository: section")
    url = re.search(r"url:\s*(\S+)", block.group(1)).group(1)
    branch = re.search(r"branch:\s*(\S+)", block.group(1)).group(1)
    return url, branch


def expected_cell() -> str:
    url, branch = repository()
    return TEMPLATE.format(url=url, branch=branch)


def notebooks() -> list[Path]:
    return sorted(p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def first_code_cell(nb: nbformat.NotebookNode):
    return next((c for c in nb.cells if c.cell_type == "code"), None)


def main(write: bool) -> int:
    want, bad = expected_cell(), []
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        cell = first_code_cell(nb)
        if cell is not None and cell.source == want:
            continue
        if write and cell is not None:
            cell.source = want
            nbformat.write(nb, path)
            print(f"updated {path.relative_to(ROOT)}")
        else:
            bad.append(path.relative_to(ROOT))
    for p in bad:
        print(f"{p}: first code cell is not the standard setup cell (run: python scripts/setup_cell.py --write)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main("--write" in sys.argv[1:]))
