"""The generated pages can never show another run's claims: a tiny book built twice, at two scales."""

import os
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _build(book: Path, scale: str) -> str:
    env = dict(os.environ, NORMLAB_SCALE=scale, NORMLAB_SEED_BASE="0")
    result = subprocess.run(
        ["jupyter-book", "build", "--keep-going", str(book)], env=env, capture_output=True, text=True, timeout=600
    )
    return result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("jupyter-book") is None, reason="jupyter-book is not installed")
def test_claims_follow_the_scale_and_a_failed_claim_is_listed_as_failed(tmp_path):
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
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Chapter"),
        nbformat.v4.new_code_cell(
            "import normlab\nnormlab.claims.check('ok', 'a claim that holds', True, normlab.get_scale(), "
            "source='explainer', quote='A sentence.', verdict='confirmed')"
        ),
        nbformat.v4.new_code_cell("normlab.claims.check('bad', 'a claim that fails', False, 'measured')"),
    ]
    nbformat.write(nb, book / "book" / "ch.ipynb")

    log = _build(book, "ci")
    claims = (book / "_build" / "html" / "book" / "claims.html").read_text()
    assert "Executing notebook failed" in log  # loud: a strict (-W) build fails on this warning
    assert "1 of 2 claims held" in claims and "scale: ci" in claims and "FAILS" in claims
    sources = (book / "_build" / "html" / "book" / "sources.html").read_text()
    assert "A sentence." in sources and 'href="ch.html#claim-ok"' in sources
    assert 'id="claim-ok"' in (book / "_build" / "html" / "book" / "ch.html").read_text()

    _build(book, "cpu")  # only the scale changed: the chapter must run again, not be reused
    claims = (book / "_build" / "html" / "book" / "claims.html").read_text()
    assert "scale: cpu" in claims and "scale: ci" not in claims
