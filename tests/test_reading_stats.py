"""scripts/reading_stats.py measures what a student meets in a chapter's lesson: tested on a small notebook
whose numbers are counted by hand, and on the book, whose course chapters (1-4) meet the lesson's targets."""

import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import reading_stats  # noqa: E402

GLOSSARY = "# Glossary\n\n```{glossary}\nwarmup\n  Raising the rate.\n\nstalled\ndiverged\n  Outcomes.\n```\n"


@pytest.fixture
def book(tmp_path, monkeypatch):
    (tmp_path / "glossary.md").write_text(GLOSSARY)
    monkeypatch.setattr(reading_stats, "BOOK", tmp_path)
    return tmp_path


def write(book: Path, cells: list) -> str:
    nbformat.write(new_notebook(cells=cells), book / "toy.ipynb")
    return "toy"


def test_the_lesson_ends_at_the_evidence_and_hidden_cells_are_not_read(book):
    name = write(book, [
        new_markdown_cell("# Toy\n\nOne two three four five. Six seven eight."),
        new_code_cell("x = 1\ny = 2\nplt.show()"),
        new_markdown_cell("Warmup helps when a run stalled. It uses nats too."),
        new_code_cell("a = 1\n" * 40, metadata={"tags": ["hide-input"]}),
        new_code_cell("print(1)"),
        new_markdown_cell("(toy-evidence)=\n## The evidence\n\nMany many words here that are not counted."),
        new_code_cell("b = 2\n" * 100),
    ])  # fmt: skip
    s = reading_stats.stats(name)
    assert s["has_evidence_part"]
    assert s["prose_words"] == 9 + 10  # "Toy" + 8 words, then 10; the evidence is not counted
    assert s["words_before_first_figure"] == 9
    assert s["lesson_code_cells"] == 2 and s["median_code_cell_lines"] == 2 and s["largest_code_cell_lines"] == 3
    assert s["missing_from_glossary"] == ["nats"]  # warmup and stalled are defined, on one line or two


def test_a_sentence_ends_at_a_full_stop_before_a_capital():
    assert [len(s.split()) for s in reading_stats.sentences("One two. Three four five? (Six) seven.\n\nEight")] == [
        2, 3, 2, 1]  # fmt: skip


def test_an_unknown_chapter_names_the_valid_ones(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["reading_stats.py", "99_nothing"])
    with pytest.raises(SystemExit, match="valid choices: .*01_post_ln"):
        reading_stats.main()


@pytest.mark.parametrize("chapter", sorted(p.stem for p in (ROOT / "book").glob("*.ipynb")))
def test_each_lesson_is_readable_in_the_time_a_student_has(chapter):
    """Issues 43-44: about 2,500 words of prose, the first figure within about 400 words, short cells, plain
    sentences, every term in the glossary, and the evidence in its own part (the quick start has none)."""
    s = reading_stats.stats(chapter)
    assert s["prose_words"] <= 2700, s
    assert s["words_before_first_figure"] <= 400, s
    assert s["median_code_cell_lines"] < 15, s
    assert s["sentence_p90_words"] < 35, s
    assert not s["missing_from_glossary"], s
    assert s["has_evidence_part"] or chapter == "quickstart", s
