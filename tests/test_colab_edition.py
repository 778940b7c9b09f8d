"""The Colab edition (colab/, scripts/colab_edition.py) is made from the book and current; its Markdown is what
Colab renders (no MyST role, directive, fence or label left after a CommonMark renderer); every number a
chapter's text glues is there, as the book's value or as a pointer to the line its cell prints; its code cells
are the book's."""

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import colab_edition  # noqa: E402

CHAPTERS = colab_edition.chapters()
STORE = json.loads(colab_edition.GLUE.read_text()) if colab_edition.GLUE.exists() else {"chapters": {}}
BIB = colab_edition.bibliography()
MYST = re.compile(r"\{[\w:-]+\}`|^\s*(:::|```\{)|^\([\w-]+\)=\s*$", re.M)


def book(chapter: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "book" / f"{chapter}.ipynb", as_version=4)


def committed(chapter: str) -> nbformat.NotebookNode:
    return nbformat.read(colab_edition.OUT / f"{chapter}.ipynb", as_version=4)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_edition_is_what_the_tool_makes_from_the_book_now(chapter):
    made, _ = colab_edition.edition(chapter, STORE, BIB)
    assert (colab_edition.OUT / f"{chapter}.ipynb").read_text() == nbformat.writes(made) + "\n", (
        "run python scripts/colab_edition.py build and commit colab/"
    )


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_myst_is_left_in_what_colab_renders(chapter):
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    for cell in committed(chapter).cells:
        if cell.cell_type == "markdown":
            left = MYST.findall(cell.source)
            assert not left, f"{chapter}: MyST left in the edition: {left} in {cell.source[:200]!r}"
            html = md.render(cell.source)
            assert "{glue" not in html and "{cite" not in html and ":::" not in html, html[:300]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_glued_number_is_a_value_or_a_pointer(chapter):
    keys = set()
    for cell in book(chapter).cells:
        if cell.cell_type == "markdown":
            keys |= set(re.findall(r"\{glue:text\}`([^`:]+)", cell.source))
    text = "\n".join(c.source for c in committed(chapter).cells if c.cell_type == "markdown")
    entry = STORE["chapters"].get(chapter)
    current = entry is not None and entry["code"] == colab_edition.code_fingerprint(chapter)
    for key in sorted(keys):
        if current and key in entry["values"]:
            continue  # filled in (the tool raises on a key it cannot format; an empty value is a left-out phrase)
        else:
            assert f"`[{key}]`" in text, f"{chapter}: neither a value nor a pointer for {key}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_code_cells_are_the_books(chapter):
    def code(nb: nbformat.NotebookNode) -> list[str]:
        return [re.sub(r"\A#@title [^\n]*\n", "", c.source) for c in nb.cells if c.cell_type == "code"]

    assert code(committed(chapter)) == code(book(chapter))


def test_a_role_the_tool_does_not_know_is_an_error():
    with pytest.raises(ValueError, match="does not know"):
        colab_edition.Rewriter("toy", {}, BIB).markdown("See {unknownrole}`x`.")


def test_roles_become_links_and_solutions_fold():
    rw = colab_edition.Rewriter("04_warmup", {"k": "0.42", "f": "0.123456", "e": ""}, BIB)
    assert rw.markdown("{glue:text}`f:.2f` and{glue:text}`e` so") == "**0.12** and so"
    out = rw.markdown(
        "A {term}`residual stream` of {glue:text}`k` nats {cite:p}`xiong2020layer`, `code {glue:text}`.\n\n"
        ":::{admonition} Solution 4.1\n:class: dropdown\n\nIt is {glue:text}`k`.\n:::\n"
    )
    assert "[residual stream](https://normlab.github.io/normlab/book/glossary.html#term-residual-stream)" in out
    assert "**0.42** nats ([Xiong et al., 2020](https://arxiv.org/abs/2002.04745))" in out
    assert "`code {glue:text}`" in out  # inline code is left as it is
    assert "<details>\n<summary><b>Solution 4.1</b>" in out and "It is **0.42**." in out
