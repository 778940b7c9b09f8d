"""The book's structure: every chapter is in the table of contents and starts with the setup cell."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import setup_cell  # noqa: E402


def test_every_notebook_is_in_the_toc_and_every_toc_entry_exists():
    toc = (ROOT / "_toc.yml").read_text()
    entries = set(re.findall(r"(?:root|file):\s*(\S+)", toc))
    for nb in setup_cell.notebooks():
        assert str(nb.relative_to(ROOT).with_suffix("")) in entries, f"{nb} is not in _toc.yml"
    for entry in entries:
        exists = any((ROOT / f"{entry}{ext}").exists() for ext in (".ipynb", ".md"))
        assert exists, f"{entry} in _toc.yml does not exist"


def test_every_notebook_starts_with_the_standard_setup_cell():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "setup_cell.py")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_setup_cell_installs_only_normlab_and_only_on_colab():
    cell = setup_cell.expected_cell()
    assert '"google.colab" in sys.modules' in cell
    installs = [line for line in cell.splitlines() if "pip install" in line]
    assert len(installs) == 1 and "#subdirectory=code" in installs[0]
    assert not re.search(r"\b(torch|ipywidgets)\b", installs[0])


def test_notebooks_are_committed_without_outputs():
    import nbformat

    for path in setup_cell.notebooks():
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), f"{path} has stored outputs"
