"""Sphinx extension for the normlab book: pages generated at build time from what actually ran.

- ``{normlab-claims}``: every claim the chapters asserted with `normlab.claims.check`, read from
  the executed notebooks in the execution cache (so it is right even when nothing re-executed).
- ``{normlab-costs}``: the measured execution time of every chapter at each scale, from the
  JSON files that `scripts/measure_costs.py` writes (one per scale, with their provenance).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nbformat
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)
CLAIM_KEY = "normlab_claim"  # normlab.claims.CLAIM_METADATA_KEY; the build need not import torch
GENERATED = ("book/claims", "book/costs")


class claims_placeholder(nodes.General, nodes.Element):
    pass


class costs_placeholder(nodes.General, nodes.Element):
    pass


class ClaimsDirective(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        return [claims_placeholder()]


class CostsDirective(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        return [costs_placeholder()]


def _notebook_docs(app: Sphinx) -> list[str]:
    """Notebook chapters in table-of-contents order."""
    env = app.env
    order = [d for d in env.toctree_includes.get(env.config.root_doc, [])]
    return [d for d in order if str(env.doc2path(d)).endswith(".ipynb")]


def _executed(app: Sphinx, docname: str) -> nbformat.NotebookNode | None:
    from jupyter_cache import get_cache

    path = app.config.nb_execution_cache_path or os.path.join(os.path.dirname(app.outdir), ".jupyter_cache")
    source = nbformat.read(str(app.env.doc2path(docname)), as_version=4)
    try:
        record = get_cache(path).match_cache_notebook(source)
    except KeyError:
        return None
    return get_cache(path).get_cache_bundle(record.pk).nb


def collect_claims(app: Sphinx) -> list[tuple[str, dict[str, Any]]]:
    claims = []
    for docname in _notebook_docs(app):
        nb = _executed(app, docname)
        if nb is None:
            logger.warning(f"normlab: no executed copy of {docname} in the cache; its claims are missing")
            continue
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                record = output.get("metadata", {}).get(CLAIM_KEY)
                if record:
                    claims.append((docname, record))
    return claims


def _table(header: list[str], rows: list[list[nodes.Node]], widths: list[int]) -> nodes.table:
    table = nodes.table(classes=["normlab-table"])
    group = nodes.tgroup(cols=len(header))
    table += group
    for w in widths:
        group += nodes.colspec(colwidth=w)
    head = nodes.thead()
    row = nodes.row()
    for text in header:
        row += nodes.entry("", nodes.paragraph(text=text))
    head += row
    group += head
    body = nodes.tbody()
    for cells in rows:
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += cell if isinstance(cell, nodes.paragraph) else nodes.paragraph("", "", cell)
            row += entry
        body += row
    group += body
    return table


def _link(app: Sphinx, fromdoc: str, todoc: str) -> nodes.Node:
    title = app.env.titles[todoc].astext() if todoc in app.env.titles else todoc
    return nodes.reference(text=title, refuri=app.builder.get_relative_uri(fromdoc, todoc))


def _claims_table(app: Sphinx, fromdoc: str) -> list[nodes.Node]:
    claims = collect_claims(app)
    held = sum(1 for _, c in claims if c["holds"])
    scales = sorted({c.get("scale", "?") for _, c in claims})
    summary = nodes.paragraph(
        text=f"{held} of {len(claims)} claims held when this book was built (scale: {', '.join(scales) or 'none'})."
    )
    out: list[nodes.Node] = [summary]
    for doc in dict.fromkeys(d for d, _ in claims):  # chapters in order, once each
        out.append(nodes.paragraph("", "", nodes.strong("", "", _link(app, fromdoc, doc))))
        rows = [
            [
                nodes.Text("✓ holds" if c["holds"] else "✗ FAILS"),
                nodes.Text(c["statement"]),
                nodes.Text(c["measured"]),
            ]
            for d, c in claims
            if d == doc
        ]
        out.append(_table(["result", "claim", "measured"], rows, [10, 45, 45]))
    return out


def _costs_table(app: Sphinx, fromdoc: str) -> list[nodes.Node]:
    data_dir = Path(app.srcdir) / "book" / "_data"
    runs = {}
    for scale in ("ci", "cpu", "gpu"):
        path = data_dir / f"costs-{scale}.json"
        if path.exists():
            runs[scale] = json.loads(path.read_text())
    if not runs:
        return [nodes.paragraph(text="No measured costs recorded yet (run scripts/measure_costs.py).")]
    docs = _notebook_docs(app)
    rows = []
    for doc in docs:
        cells: list[nodes.Node] = [_link(app, fromdoc, doc)]
        for run in runs.values():
            seconds = run["seconds"].get(doc)
            cells.append(nodes.Text("not measured" if seconds is None else f"{seconds:.0f} s"))
        rows.append(cells)
    totals: list[nodes.Node] = [nodes.strong(text="all chapters")]
    for run in runs.values():
        totals.append(nodes.strong(text=f"{sum(run['seconds'].values()):.0f} s"))
    rows.append(totals)
    header = ["chapter"] + [f"{scale} scale" for scale in runs]
    out: list[nodes.Node] = [_table(header, rows, [40] + [20] * len(runs))]
    items = nodes.bullet_list()
    for scale, run in runs.items():
        p = run["provenance"]
        text = (
            f"{scale}: measured {p['date']} on {p['device']} ({p['threads']} torch thread(s), torch {p['torch']}, "
            f"Python {p['python']}), normlab at {p['revision']}; each notebook executed once, end to end."
        )
        items += nodes.list_item("", nodes.paragraph(text=text))
    out.append(items)
    return out


def resolve(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for node in doctree.findall(claims_placeholder):
        node.replace_self(_claims_table(app, docname))
    for node in doctree.findall(costs_placeholder):
        node.replace_self(_costs_table(app, docname))


def always_outdated(app: Sphinx, env: Any, added: set, changed: set, removed: set) -> list[str]:
    # The generated pages depend on every chapter's results: rewrite them on every build.
    return [d for d in GENERATED if d in env.found_docs]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_node(claims_placeholder)
    app.add_node(costs_placeholder)
    app.add_directive("normlab-claims", ClaimsDirective)
    app.add_directive("normlab-costs", CostsDirective)
    app.connect("env-get-outdated", always_outdated)
    app.connect("doctree-resolved", resolve)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
