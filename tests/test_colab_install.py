"""The chapters' Colab cell, simulated: in a fresh environment that already has torch, installing
normlab the way the cell does leaves torch alone, and a second run of the cell installs nothing."""

import glob
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import normlab

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import setup_cell  # noqa: E402


def _local_torch_wheel() -> str | None:
    """A torch wheel that pip can install without the network (this project's machines keep one)."""
    config = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    dirs = re.findall(r"find-links='([^']+)'", config)
    wheels = [w for d in dirs for w in glob.glob(f"{d}/torch-*.whl")]
    return sorted(wheels)[-1] if wheels else None


def _pip(python: Path, *args: str) -> str:
    result = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def _run(python: Path, code: str) -> str:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(_local_torch_wheel() is None, reason="no local torch wheel: this test would download torch")
def test_colab_cell_install_keeps_the_preinstalled_torch(tmp_path):
    venv.create(tmp_path / "env", with_pip=True)
    python = tmp_path / "env" / "bin" / "python"
    _pip(python, "install", "-q", _local_torch_wheel())  # the "preinstalled" torch of this runtime
    torch_before = _run(python, "import torch; print(torch.__version__, torch.__file__)")

    # The cell's own pip line, pointed at this repository's committed state instead of GitHub.
    line = next(x for x in setup_cell.expected_cell().splitlines() if "pip install" in x)
    spec = re.search(r'"(normlab @ git\+[^"]+)"', line).group(1)
    url, branch = setup_cell.repository()
    local = spec.replace(f"{url}@{branch}", f"file://localhost{ROOT}")
    log = _pip(python, "install", local)

    assert _run(python, "import torch; print(torch.__version__, torch.__file__)") == torch_before
    assert not re.search(r"(Collecting|Downloading|Installing collected packages:.*)\btorch\b", log), log
    # The cell is guarded by find_spec("normlab"): once installed, running it again installs nothing.
    assert _run(python, "from importlib.util import find_spec; print(find_spec('normlab') is not None)") == "True"
    # On a CPU-only Colab runtime the cell points the reader at the GPU runtime.
    hint = _run(python, "import sys, types; sys.modules['google.colab'] = types.ModuleType('google.colab'); "
                "import normlab; print(normlab.describe_environment())")  # fmt: skip
    assert "device=cpu" in hint and "Change runtime type" in hint
    # The installed package carries its corpus: the same bytes as here, whatever this Python is.
    fingerprint = _run(python, "import normlab; print(normlab.load_corpus().fingerprint)")
    assert fingerprint.startswith(normlab.CORPUS_SHA256)
