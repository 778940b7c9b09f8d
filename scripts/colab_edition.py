"""The Colab edition (colab/book/*.ipynb): every chapter rewritten from book/ for Colab's Markdown renderer, which knows
CommonMark, tables and $-math but no MyST. Made by this tool, never by hand; tests/test_colab_edition.py checks it
is current.

    python scripts/colab_edition.py collect _build/jupyter_execute   # the glued values of an executed build
    python scripts/colab_edition.py build                             # writes colab/book/*.ipynb
    python scripts/colab_edition.py build --check                     # fails if colab/ is not current

What changes, and only in Markdown cells (code cells are the book's, a `#@title` line added where the book
hides a cell):
- {glue:text}`key`: the value the book's build printed there, in bold, from book/_data/glue-cpu.json (collected
  from an executed cpu build, kept per chapter with the chapter's code fingerprint: a chapter whose code has
  changed since gets no stale value but a pointer to the `[key] value` line the cell prints on Colab);
- {cite:p} and {cite:t}: "(Author et al., year)" and "Author et al. (year)", linked to the paper;
- {term}, {doc}, {ref}: links into the rendered book; `(label)=` lines dropped;
- :::{admonition} dropdowns (the solutions): folded <details> blocks; other admonitions: block quotes;
- tab sets: their tabs one after another, each under its title;
- a figure's caption (cell metadata): an italic line after the cell that draws it;
- cells the book hides (hide-input, hide-cell, remove-cell) and every code cell of "The evidence": folded
  (Colab's `cellView: "form"`).
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
OUT = ROOT / "colab" / "book"  # the Colab button opens colab/book/<chapter>.ipynb (_config.yml path_to_book)
GLUE = BOOK / "_data" / "glue-cpu.json"
BOOK_URL = "https://normlab.github.io/normlab"  # the rendered book (GitHub Pages of the repository in _config.yml)

sys.path.insert(0, str(ROOT / "scripts"))
from claim_rates import code_fingerprint  # noqa: E402
from reading_stats import EVIDENCE, HIDDEN  # noqa: E402  (the lesson ends where the reading count ends)


def chapters() -> list[str]:
    return sorted(p.stem for p in BOOK.glob("*.ipynb"))


# --- the glued values of an executed build -------------------------------------------------------------------


def glued_values(executed: Path) -> dict[str, str]:
    """The text values a notebook glued: myst-nb writes them beside the executed notebook (<name>.glue.json)."""
    values: dict[str, str] = {}
    glue = executed.with_suffix(".glue.json")  # a book build's; absent when the notebook glues nothing
    if glue.exists():
        glued = json.loads(glue.read_text())
    else:  # a notebook executed outside the build (scripts/execute_chapter.py): glue's display outputs
        nb = nbformat.read(executed, as_version=4)
        glued = {out["metadata"]["scrapbook"]["name"]: out for cell in nb.cells for out in cell.get("outputs", [])
                 if out.get("metadata", {}).get("scrapbook", {}).get("name")}  # fmt: skip
    for name, out in glued.items():
        prefix = out.get("metadata", {}).get("scrapbook", {}).get("mime_prefix", "")  # glue(display=False)'s
        data = {k.removeprefix(prefix): v for k, v in out.get("data", {}).items()}
        text = data.get("text/plain")
        if text is None or "image/png" in data:
            continue  # a figure: the chapter's own cell draws it
        try:
            value = ast.literal_eval(text)
            values[name] = value if isinstance(value, str) else text
        except (ValueError, SyntaxError):
            values[name] = text
    return values


def collect(args: argparse.Namespace) -> None:
    executed = Path(args.executed)
    store = json.loads(GLUE.read_text()) if GLUE.exists() else {"scale": "cpu", "chapters": {}}
    for chapter in chapters():
        path = executed / "book" / f"{chapter}.ipynb"
        if not path.exists():
            print(f"{chapter}: no executed notebook under {executed}; kept what the store has")
            continue
        store["chapters"][chapter] = {"code": code_fingerprint(chapter, path), "values": glued_values(path),
                                      "from": str(args.label or executed)}  # fmt: skip
        print(f"{chapter}: {len(store['chapters'][chapter]['values'])} values")
    GLUE.write_text(json.dumps(store, indent=1, ensure_ascii=False, sort_keys=True) + "\n")


# --- Markdown, rewritten --------------------------------------------------------------------------------------


def bibliography() -> dict[str, dict]:
    from pybtex.database import parse_file

    out = {}
    for key, entry in parse_file(str(BOOK / "references.bib")).entries.items():
        people = entry.persons.get("author", [])
        last = [" ".join(p.last_names).replace("{", "").replace("}", "") for p in people]
        names = last[0] if len(last) == 1 else f"{last[0]} and {last[1]}" if len(last) == 2 else f"{last[0]} et al."
        fields = entry.fields
        url = fields.get("url") or (f"https://arxiv.org/abs/{fields['eprint']}" if "eprint" in fields else None)
        if url is None and "doi" in fields:
            url = f"https://doi.org/{fields['doi']}"
        out[key] = {"names": names or fields.get("organization", key), "year": fields.get("year", "n.d."), "url": url}
    return out


def _protect(text: str) -> tuple[str, list[str]]:
    """Plain fenced code blocks, set aside so that nothing inside them is rewritten."""
    kept: list[str] = []

    def keep(m: re.Match) -> str:
        kept.append(m.group(0))
        return f"\x00{len(kept) - 1}\x00"

    text = re.sub(r"^(`{3,})(?!\{)[^\n]*\n.*?^\1\s*$", keep, text, flags=re.M | re.S)  # ```python ... ```
    return text, kept


def _restore(text: str, kept: list[str]) -> str:
    return re.sub(r"\x00(\d+)\x00", lambda m: kept[int(m.group(1))], text)


class Rewriter:
    def __init__(self, chapter: str, values: dict[str, str] | None, bib: dict[str, dict]):
        self.chapter, self.values, self.bib = chapter, values, bib
        self.pointers: set[str] = set()

    def glue(self, key: str, spec: str = "") -> str:
        """A glued value in bold, formatted as the book formats it ({glue:text}`key:.2f`); an empty one (a
        phrase the chapter leaves out) as nothing; a value not collected as a pointer to the printed line."""
        if self.values is not None and key in self.values:
            value = self.values[key]
            if spec:  # the number as its own type (an int for ':d'), formatted as the book does
                value = format(ast.literal_eval(value), spec)
            return f"**{value}**" if value.strip() else ""
        self.pointers.add(key)
        return f"(printed as `[{key}]`)"

    def cite(self, kind: str, keys: str) -> str:
        parts = []
        for key in (k.strip() for k in keys.split(",")):
            e = self.bib.get(key)
            if e is None:
                raise ValueError(f"{self.chapter}: no bibliography entry {key!r} in book/references.bib")
            who = f"{e['names']}, {e['year']}" if kind == "p" else f"{e['names']} ({e['year']})"
            parts.append(f"[{who}]({e['url']})" if e["url"] else who)
        return f"({'; '.join(parts)})" if kind == "p" else "; ".join(parts)

    def role(self, m: re.Match) -> str:
        name, body = m.group(1), m.group(2)
        text, target = (body, body)
        tm = re.fullmatch(r"(.*?)\s*<([^>]+)>", body, re.S)
        if tm:
            text, target = tm.group(1), tm.group(2)
        if name == "glue:text" or name == "glue":
            key, _, spec = target.partition(":")
            return self.glue(key, spec)
        if name in ("cite:p", "cite:t"):
            return self.cite(name[-1], target)
        if name == "term":
            anchor = "term-" + re.sub(r"[^a-z0-9]+", "-", target.lower()).strip("-")
            return f"[{text}]({BOOK_URL}/book/glossary.html#{anchor})"
        if name == "doc":
            doc = target.removesuffix(".ipynb").removesuffix(".md")
            label = text if tm else doc
            return f"[{label}]({BOOK_URL}/book/{doc}.html)"
        if name == "ref":
            return f"[{text}]({BOOK_URL}/book/{self.chapter}.html#{target})"
        if name == "math":
            return f"${body}$"
        if name == "claim":  # the check mark, linked to the claim's check in the rendered book
            return f"<sup>[✓]({BOOK_URL}/book/{self.chapter}.html#claim-{target.strip()})</sup>"
        raise ValueError(f"{self.chapter}: a MyST role the Colab edition does not know: {{{name}}}")

    def directive(self, m: re.Match) -> str:
        name, title, body = m.group(2), m.group(3).strip(), m.group(4)
        options = dict(re.findall(r"^:(\w+):\s*(.*)$", body, re.M))
        body = re.sub(r"^:\w+:.*\n", "", body, flags=re.M).strip("\n")
        body = self.markdown(body)
        if name == "admonition" and "dropdown" in options.get("class", ""):
            return f"<details>\n<summary><b>{title}</b> (click to show)</summary>\n\n{body}\n\n</details>"
        if name in ("admonition", "note", "tip", "warning", "important"):
            head = f"**{title or name.capitalize()}.** "
            return "\n".join("> " + line if line else ">" for line in (head + body).splitlines())
        if name == "tab-set":
            return body
        if name == "tab-item":
            return f"**{title}**\n\n{body}"
        if name in ("glue", "glue:figure"):
            return f"*(The rendered book shows the figure `{title}` here; on Colab a cell of this chapter draws it.)*"
        raise ValueError(f"{self.chapter}: a MyST directive the Colab edition does not know: {{{name}}}")

    def markdown(self, text: str) -> str:
        text = re.sub(r"^\([\w-]+\)=\s*\n", "", text, flags=re.M)  # (label)= targets
        text = re.sub(r"^(:{3,}|`{3,})\{([\w:-]+)\}([^\n]*)\n(.*?)^\1\s*$", self.directive, text, flags=re.M | re.S)
        text, kept = _protect(text)
        # one left-to-right scan: a role, or an inline code span left as it is (so a role's closing backtick is
        # never read as the opening of a code span)
        text = re.sub(r"\{([\w:-]+)\}`([^`]*)`|`[^`\n]+`", lambda m: self.role(m) if m.group(1) else m.group(0), text)
        return _restore(text, kept)


# --- notebooks ------------------------------------------------------------------------------------------------


def title_of(cell: nbformat.NotebookNode) -> str:
    """The folded cell's title: its first comment line, or what it does."""
    first = next((line for line in cell.source.splitlines() if line.strip()), "")
    if first.startswith("#"):
        return first.lstrip("# ").strip()[:90].rstrip()
    if "plt." in cell.source or "fig" in cell.source:
        return "Code that draws the figure (click to show)"
    return "Code (click to show)"


def edition(chapter: str, store: dict, bib: dict[str, dict]) -> tuple[nbformat.NotebookNode, Rewriter]:
    nb = nbformat.read(BOOK / f"{chapter}.ipynb", as_version=4)
    entry = store["chapters"].get(chapter)
    values = entry["values"] if entry and entry["code"] == code_fingerprint(chapter) else None
    rw = Rewriter(chapter, values, bib)
    cells, in_evidence = [], False
    for cell in nb.cells:
        cell = copy.deepcopy(cell)
        if cell.cell_type == "markdown":
            in_evidence = in_evidence or bool(EVIDENCE.search(cell.source))
            cell.source = rw.markdown(cell.source)
            cells.append(cell)
            continue
        tags = set(cell.metadata.get("tags", []))
        caption = cell.metadata.get("mystnb", {}).get("figure", {}).get("caption")
        if tags & HIDDEN or in_evidence:
            cell.metadata["cellView"] = "form"
            cell.source = f"#@title {title_of(cell)}\n" + cell.source
        cells.append(cell)
        if caption:
            cells.append(nbformat.v4.new_markdown_cell(f"*Figure: {rw.markdown(caption)}*"))
    numbers = ("Numbers in **bold** are the book's, from its build at the cpu scale (seed base 0); every cell "
               "that computes one also prints it for your own run as `[name] value`, which differs at another "
               "scale, seed base or machine.") if values is not None else (  # fmt: skip
               "This chapter changed since the book's numbers were collected: each number in the text points to "
               "the `[name] value` line a cell prints when you run it.")  # fmt: skip
    head = nbformat.v4.new_markdown_cell(
        f"*The Colab edition of [this chapter of normlab]({BOOK_URL}/book/{chapter}.html), made from the book by "
        f"`scripts/colab_edition.py`. Run the first cell first: it installs `normlab`. {numbers} Solutions and "
        "the evidence's code are folded: click to open them.*"
    )
    for c in [head, *cells]:
        c.id = c.get("id") or None
    out = nbformat.v4.new_notebook(cells=[head, *cells], metadata=copy.deepcopy(nb.metadata))
    out.metadata["colab"] = {"provenance": [], "name": f"{chapter}.ipynb"}
    for i, c in enumerate(out.cells):  # ids stable from one run to the next
        c.id = f"colab-{i:03d}"
    return out, rw


def build(args: argparse.Namespace) -> None:
    store = json.loads(GLUE.read_text()) if GLUE.exists() else {"chapters": {}}
    bib = bibliography()
    OUT.mkdir(parents=True, exist_ok=True)
    stale = []
    for chapter in chapters():
        nb, rw = edition(chapter, store, bib)
        text = nbformat.writes(nb) + "\n"
        path = OUT / f"{chapter}.ipynb"
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(chapter)
            continue
        path.write_text(text)
        how = f"{len(rw.pointers)} pointers" if rw.pointers else "every value filled"
        print(f"{path.relative_to(ROOT)}: {how}")
    if stale:
        sys.exit(f"the Colab edition is not current for {stale}: run python scripts/colab_edition.py build")


def preview(args: argparse.Namespace) -> None:
    """One chapter's edition as a page rendered the way Colab renders Markdown: CommonMark with tables and raw
    HTML, $-math typeset by MathJax (the copy sphinx-mathjax-offline ships, so it works offline), code cells
    as code, folded ones as their title. For looking at in a browser (and for screenshots)."""
    import html

    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    nb = nbformat.read(OUT / f"{args.chapter}.ipynb", as_version=4)
    parts = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            # as Jupyter and Colab do, math is set aside before the Markdown is parsed (its backslashes
            # and underscores are TeX, not Markdown), then handed to MathJax as written
            maths = [html.escape(m) for m in re.findall(r"\$\$.*?\$\$|\$[^$\n]+\$", cell.source, flags=re.S)]
            pieces = re.split(r"\$\$.*?\$\$|\$[^$\n]+\$", cell.source, flags=re.S)
            text = "".join(p + (f"MATH{i}END" if i < len(maths) else "") for i, p in enumerate(pieces))
            rendered = re.sub(r"MATH(\d+)END", lambda m, maths=maths: maths[int(m.group(1))], md.render(text))
            parts.append(f'<div class="md">{rendered}</div>')
        elif cell.metadata.get("cellView") == "form":
            title = cell.source.splitlines()[0].removeprefix("#@title ")
            parts.append(f'<div class="form">&#9656; {html.escape(title)} <i>(show code)</i></div>')
        else:
            parts.append(f"<pre>{html.escape(cell.source)}</pre>")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{args.chapter} (Colab edition)</title>
<script>MathJax = {{tex: {{inlineMath: [["$", "$"]], displayMath: [["$$", "$$"]]}}}};</script>
<script src="{_mathjax()}"></script>
<style>body{{font-family:Roboto,Arial,sans-serif;max-width:900px;margin:2em auto;font-size:14px;line-height:1.5}}
pre{{background:#f7f7f7;padding:8px;border:1px solid #ddd;overflow-x:auto}} .form{{background:#f7f7f7;padding:6px;
border:1px solid #ddd;color:#555}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:3px 6px}}
blockquote{{border-left:4px solid #ccc;margin-left:0;padding-left:1em;color:#444}}</style></head>
<body>{"".join(parts)}</body></html>"""
    Path(args.out).write_text(page)
    print(f"wrote {args.out}")


def _mathjax() -> str:
    """The MathJax that sphinx-mathjax-offline ships (a data folder, not a module), or its CDN."""
    import sysconfig

    js = Path(sysconfig.get_paths()["purelib"]) / "sphinx-mathjax-offline" / "static" / "mathjax" / "tex-chtml.js"
    return js.as_uri() if js.exists() else "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="store the glued values of an executed build")
    c.add_argument("executed", help="a folder of executed notebooks, e.g. _build/jupyter_execute")
    c.add_argument("--label", help="where they came from (kept in the store)")
    b = sub.add_parser("build", help="write colab/book/*.ipynb")
    b.add_argument("--check", action="store_true", help="fail if colab/book/ differs from what would be written")
    v = sub.add_parser("preview", help="one chapter's edition as an HTML page rendered the way Colab renders it")
    v.add_argument("chapter")
    v.add_argument("out", help="the HTML file to write")
    args = parser.parse_args()
    {"collect": collect, "build": build, "preview": preview}[args.command](args)


if __name__ == "__main__":
    main()
