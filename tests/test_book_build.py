"""The generated pages can never show another run's claims: a tiny book built twice, at two scales."""

import os
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _build(book: Path, scale: str, **env_vars: str) -> str:
    env = dict(os.environ, NORMLAB_SCALE=scale, NORMLAB_SEED_BASE="0", **env_vars)
    result = subprocess.run(
        ["jupyter-book", "build", "--keep-going", str(book)], env=env, capture_output=True, text=True, timeout=600
    )
    return result.stdout + result.stderr


def _tiny_book(tmp_path: Path, cells: list[str]) -> Path:
    """A book with the real _config.yml and extension, one chapter ``ch`` of ``cells``, and the
    generated claims and sources pages."""
    book = tmp_path / "book"
    (book / "book").mkdir(parents=True)
    shutil.copytree(ROOT / "_ext", book / "_ext")
    config = (ROOT / "_config.yml").read_text()
    (book / "_config.yml").write_text(config.replace("  - book/references.bib\n", "  - book/refs.bib\n"))
    (book / "book" / "refs.bib").write_text("@misc{x, title={x}, year={2026}}\n")
    chapters = "".join(f"  - file: book/{name}\n" for name in ("ch", "sources", "claims"))
    (book / "_toc.yml").write_text(f"format: jb-book\nroot: book/intro\nchapters:\n{chapters}")
    (book / "book" / "intro.md").write_text("# Intro\n")
    (book / "book" / "claims.md").write_text("# Claims\n\n```{normlab-claims}\n```\n")
    (book / "book" / "sources.md").write_text("# Sources\n\n```{normlab-sources}\n```\n")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# Chapter")] + [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, book / "book" / "ch.ipynb")
    return book


@pytest.mark.skipif(shutil.which("jupyter-book") is None, reason="jupyter-book is not installed")
def test_claims_follow_the_scale_and_a_failed_claim_is_listed_as_failed(tmp_path):
    book = _tiny_book(
        tmp_path,
        [
            "import normlab\nnormlab.claims.check('ok', 'a claim that holds', True, normlab.get_scale(), "
            "source='explainer', quote='A sentence.', verdict='confirmed')",
            "normlab.claims.check('same', 'an identity', True, 'exact', kind='identity')\n"
            "normlab.claims.check('cite', 'a citation', True, 'in the bibliography', kind='cited')",
            "normlab.claims.check('bad', 'a claim that fails', False, 'measured')",
        ],
    )

    log = _build(book, "ci")
    claims = (book / "_build" / "html" / "book" / "claims.html").read_text()
    assert "Executing notebook failed" in log  # loud: a strict (-W) build fails on this warning
    assert "1 of 2 measured claims held" in claims and "scale: ci" in claims and "FAILS" in claims
    # identities and citations are counted apart from the findings, and labelled so in the index
    assert "1 of 1 identities" in claims and "1 of 1 citation checks" in claims
    assert "✓ identity" in claims and "✓ cited" in claims
    sources = (book / "_build" / "html" / "book" / "sources.html").read_text()
    assert "A sentence." in sources and 'href="ch.html#claim-ok"' in sources
    assert 'id="claim-ok"' in (book / "_build" / "html" / "book" / "ch.html").read_text()

    _build(book, "cpu")  # only the scale changed: the chapter must run again, not be reused
    claims = (book / "_build" / "html" / "book" / "claims.html").read_text()
    assert "scale: cpu" in claims and "scale: ci" not in claims


SWEEP_CELL = """import normlab
jobs = [(dict(d_model=16, n_heads=2, n_layers=1), normlab.TrainConfig(steps=3, batch_size=2, seq_len=8, seed=s))
        for s in range(2)]
print(len(normlab.run_many(jobs, workers=2, desc="tiny sweep")), "runs")"""


@pytest.mark.skipif(shutil.which("jupyter-book") is None, reason="jupyter-book is not installed")
def test_a_sweep_reports_in_the_build_output_and_a_timeout_names_its_chapter_and_cell(tmp_path):
    book = _tiny_book(tmp_path, [SWEEP_CELL, "import time\n\ntime.sleep(120)"])
    log = _build(book, "ci", NORMLAB_CELL_TIMEOUT="40")
    # The sweep's progress reaches the terminal that runs the build ...
    assert "normlab: tiny sweep: 2 of 2 runs to train (0 from the store) on 2 worker processes" in log
    assert "normlab: tiny sweep: 2/2 runs finished in" in log
    # ... and one line says which chapter and cell hit the limit, and why.
    expected = (
        "normlab: book/ch failed in code cell 2 of 2 (`import time`): CellTimeoutError: it ran past the "
        "40 s cell limit of the ci scale"
    )
    assert expected in log, log[-3000:]
    report = book / "_build" / "html" / "reports" / "book" / "ch.err.log"
    assert report.exists() and "report: _build/html/reports/book/ch.err.log" in log
    page = (book / "_build" / "html" / "book" / "ch.html").read_text()
    assert "runs to train" not in page and "runs finished" not in page  # the page shows only "2 runs"
