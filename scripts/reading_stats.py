"""What a student meets in each chapter's lesson: prose words, reading minutes, words before the first figure,
code cell sizes, sentence lengths, and the terms it uses that the glossary does not define.

    python scripts/reading_stats.py [--json] [chapter ...]

The lesson is every cell before the chapter's "## The evidence" heading (the whole chapter when it has
none); the evidence part, its claim checks and maintainers' cells, is not counted. Prose is the text of the
Markdown cells without code, math, MyST roles' targets, links' addresses, tables' rules and admonition
fences; a sentence ends at ".", "?" or "!" followed by a space and a capital, or at a paragraph's end.
Reading minutes: prose at 200 words a minute (technical text) plus 5 seconds per line of visible code.
A figure is a Markdown image or a code cell that draws one (`plt.show()` or a `glue` of a figure). A
visible code cell is one the rendered page shows (not tagged remove-cell, hide-cell or hide-input).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
EVIDENCE = re.compile(r"^#{2,3} The evidence\b", re.M)
HIDDEN = {"remove-cell", "hide-cell", "hide-input", "remove-input"}
WORDS_PER_MINUTE = 200
SECONDS_PER_CODE_LINE = 5
# Terms a student fresh from the course notes has not met: each one a lesson uses must be in the glossary.
# (Found in the chapters by the issues' readers; add a term here when a lesson starts using one.)
JARGON = (
    "paired t-interval", "standard error", "Clopper-Pearson", "bootstrap", "band", "veto", "selection seed",
    "report seed", "LR sensitivity", "nats", "unigram level", "bigram level", "trigram level", "n-gram level",
    "stalled", "diverged", "singular value", "Frobenius norm", "participation ratio", "WSD", "RoPE", "z-loss",
    "massive activations", "Placement", "Wrap", "seed base", "beyond seed noise", "spectrum", "Jacobian",
    "LayerNorm", "RMSNorm", "DyT", "QK-norm", "DeepNorm", "sandwich norm", "NormFormer", "ReZero", "Admin",
    "Mix-LN", "LayerNorm Scaling", "residual stream", "warmup", "sub-layer", "post-LN", "pre-LN",
)  # fmt: skip


def glossary_terms() -> set[str]:
    """The terms book/glossary.md defines (lower case): the lines of its glossary block that start a term."""
    text = (BOOK / "glossary.md").read_text()
    block = re.search(r"```\{glossary\}\n(.*?)```", text, re.S)
    lines = block.group(1).splitlines() if block else []
    terms = set()
    for line in lines:
        if line and not line.startswith((" ", "\t")):
            terms |= {t.strip().lower() for t in line.split(";")}
    return terms


def prose(markdown: str) -> str:
    """The words a student reads in a Markdown cell."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)  # code blocks and directives
    text = re.sub(r"^:{3,}.*$", " ", text, flags=re.M)  # colon fences
    text = re.sub(r"^\s*:\w+:.*$", " ", text, flags=re.M)  # directive options
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)  # display math
    text = re.sub(r"\$[^$\n]+\$", " X ", text)  # inline math reads as one word
    text = re.sub(r"\{claim\}`[^`]*`", " ", text)  # a claim's check mark is not read
    text = re.sub(r"\{[\w:-]+\}`([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", text)  # {role}`text <target>` -> text
    text = re.sub(r"`[^`]*`", " X ", text)  # inline code reads as one word
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", " ", text)  # images (their alt text is not read)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"^\s*\|?[-:| ]+\|?\s*$", " ", text, flags=re.M)  # table rules
    text = re.sub(r"[#*_>|]", " ", text)
    return text


def sentences(text: str) -> list[str]:
    out = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = " ".join(paragraph.split())
        out += [s for s in re.split(r"(?<=[.?!])\s+(?=[A-Z(\"'])", paragraph) if s.split()]
    return out


def draws(cell: nbformat.NotebookNode) -> bool:
    if cell.cell_type == "markdown":
        return bool(re.search(r"!\[|\{glue:figure\}|```\{figure\}|```\{glue\}", cell.source))
    return "plt.show()" in cell.source or re.search(r"glue\([^)]*fig", cell.source) is not None


def stats(chapter: str) -> dict:
    nb = nbformat.read(BOOK / f"{chapter}.ipynb", as_version=4)
    cells = nb.cells
    end = next((i for i, c in enumerate(cells) if c.cell_type == "markdown" and EVIDENCE.search(c.source)), len(cells))
    lesson = cells[:end]
    words, before_figure, seen_figure, lengths, code = 0, None, False, [], []
    text = ""
    for cell in lesson:
        if not seen_figure and draws(cell):
            seen_figure, before_figure = True, words
        if cell.cell_type == "markdown":
            body = prose(cell.source)
            text += body + "\n\n"
            words += len(body.split())
            lengths += [len(s.split()) for s in sentences(body)]
        elif cell.cell_type == "code" and not HIDDEN & set(cell.metadata.get("tags", [])):
            code.append(len([line for line in cell.source.splitlines() if line.strip()]))
    defined = glossary_terms()
    lower = text.lower()
    missing = sorted(
        t for t in JARGON if re.search(rf"\b{re.escape(t.lower())}s?\b", lower) and t.lower() not in defined
    )
    lengths.sort()
    return {
        "chapter": chapter,
        "prose_words": words,
        "reading_minutes": round(words / WORDS_PER_MINUTE + sum(code) * SECONDS_PER_CODE_LINE / 60),
        "words_before_first_figure": before_figure if seen_figure else words,
        "lesson_code_cells": len(code),
        "median_code_cell_lines": statistics.median(code) if code else 0,
        "largest_code_cell_lines": max(code, default=0),
        "sentence_p90_words": lengths[int(0.9 * (len(lengths) - 1))] if lengths else 0,
        "missing_from_glossary": missing,
        "has_evidence_part": end < len(cells),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="default: every chapter")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    names = args.chapters or sorted(p.stem for p in BOOK.glob("*.ipynb"))
    unknown = [n for n in names if not (BOOK / f"{n}.ipynb").exists()]
    if unknown:
        sys.exit(f"no chapter {unknown}; valid choices: {', '.join(sorted(p.stem for p in BOOK.glob('*.ipynb')))}")
    rows = [stats(n) for n in names]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'chapter':22s} {'words':>6s} {'min':>4s} {'to fig':>6s} {'cells':>5s} {'median':>6s} {'max':>4s} "
          f"{'p90 sent':>8s}  missing from the glossary")  # fmt: skip
    for r in rows:
        print(f"{r['chapter']:22s} {r['prose_words']:6d} {r['reading_minutes']:4d} {r['words_before_first_figure']:6d} "
              f"{r['lesson_code_cells']:5d} {r['median_code_cell_lines']:6.0f} {r['largest_code_cell_lines']:4d} "
              f"{r['sentence_p90_words']:8d}  {', '.join(r['missing_from_glossary']) or '-'}")  # fmt: skip


if __name__ == "__main__":
    main()
