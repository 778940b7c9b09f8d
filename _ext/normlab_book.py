"""Sphinx extension for the normlab book: pages generated at build time from what actually ran.

- ``{normlab-claims}``: every claim the chapters asserted with `normlab.claims.check`, read from
  the notebooks as this build executed them (failed claims included: they show as failed).
- The execution cache is kept per scale and seed base (``_build/.jupyter_cache/ci-seed0``, ...),
  so switching ``NORMLAB_SCALE`` or ``NORMLAB_SEED_BASE`` re-executes the chapters instead of
  showing results from another scale; a claim recorded at another scale fails the build.
- A figure cell (``mystnb.figure`` metadata) must produce exactly one display output, or myst-nb
  names several outputs after one figure: a warning, so the strict build fails.
- ``{normlab-sources}``: "The sources, checked": every statement of the course notes and the
  explainer that a chapter checks (`check(..., source=, quote=, verdict=)`), with our measurement.
- ``{normlab-costs}``: the measured execution time of every chapter at each scale, from the
  JSON files that `scripts/measure_costs.py` writes (one per scale, with their provenance).
- Chapter execution cannot hang on a lost reply (`reply_watch`, installed in `setup`).
- ``{normlab-bench}``: what `python -m normlab.bench` measured (``book/_data/bench-<device>.json``):
  its tables, and a figure of a training step's cost against depth and width drawn from them.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import nbformat
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1]  # the repository: _ext/ sits in it
CLAIM_KEY = "normlab_claim"  # normlab.claims.CLAIM_METADATA_KEY; the build need not import torch
GENERATED = ("book/claims", "book/costs", "book/sources", "book/intro")
SOURCE_NAMES = {"course notes": "the course notes", "explainer": "the explainer"}


class claims_placeholder(nodes.General, nodes.Element):
    pass


class costs_placeholder(nodes.General, nodes.Element):
    pass


class sources_placeholder(nodes.General, nodes.Element):
    pass


class path_placeholder(nodes.General, nodes.Element):
    pass


class PathDirective(SphinxDirective):
    """The path through the book: each chapter's part (the course or beyond it) and its reading time."""

    def run(self) -> list[nodes.Node]:
        return [path_placeholder()]


class SourcesDirective(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        return [sources_placeholder()]


class ClaimsDirective(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        return [claims_placeholder()]


class CostsDirective(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        return [costs_placeholder()]


class BenchDirective(SphinxDirective):
    """The benchmark's stored results as MyST (tables, then the figure), parsed in place."""

    def run(self) -> list[nodes.Node]:
        from docutils.statemachine import StringList

        from normlab.bench import format_table

        data = Path(self.env.srcdir) / "book" / "_data"
        markdown = []
        for path in sorted(data.glob("bench-*.json")):
            self.env.note_dependency(str(path))
            result = json.loads(path.read_text())
            figure = _draw_cost_figure(result, Path(self.env.srcdir) / "book" / "_generated" / f"{path.stem}.png")
            markdown += [f"### {path.stem.removeprefix('bench-')}: {result['device']}", "", format_table(result), ""]
            alt = f"Cost of a training step against depth and width, {result['device']}"
            markdown += [f"![{alt}](_generated/{figure.name})", ""]
        if not markdown:
            markdown = ["No benchmark stored yet: run `python -m normlab.bench --out book/_data/bench-cpu.json`."]
        if not (data / "bench-gpu.json").exists():
            markdown += ["### gpu: not measured yet", "", _gpu_sizing()]
        container = nodes.container()
        self.state.nested_parse(StringList(markdown, source=self.env.docname), self.content_offset, container)
        return container.children


def _gpu_sizing() -> str:
    """How the gpu scale was sized while no GPU has measured it: from FLOP counts, said as such."""
    from normlab.bench import SIZES, step_flops

    flops = {name: step_flops(s.d_model, s.n_layers, s.batch, s.seq) for name, s in SIZES.items()}
    g = SIZES["gpu"]
    return (
        f"No GPU has run the benchmark or the chapters for this book yet, so the gpu scale is sized from "
        f"FLOP counts (`normlab.bench.step_flops`): a training step of the gpu size (d {g.d_model}, "
        f"{g.n_layers} blocks, batch {g.batch} x {g.seq}) is {flops['gpu'] / 1e9:.1f} GFLOP, "
        f"{flops['gpu'] / flops['cpu']:.0f}x a cpu-size step. Models this small keep a GPU's cores mostly idle "
        f"one at a time, which is why a sweep on a GPU trains its runs as one batched computation "
        f"(`normlab.batched`). On a CUDA machine, `bash scripts/measure_gpu.sh` measures the benchmark "
        f"(with the batched speed-up at K = 8, 32 and 128) and every chapter at the gpu scale, and writes "
        f"`book/_data/bench-gpu.json` and `book/_data/costs-gpu.json`, which this page then shows."
    )


def _draw_cost_figure(result: dict[str, Any], out: Path) -> Path:
    """ms per training step against depth (at one width) and width (at one depth), with the line a
    cost proportional to the FLOP count would follow, through the deepest or widest point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from normlab import plot

    plot.use_style()
    cost = result["cost"]
    d_fixed = max(c["d_model"] for c in cost if sum(o["d_model"] == c["d_model"] for o in cost) > 1)
    depth = sorted((c for c in cost if c["d_model"] == d_fixed), key=lambda c: c["n_layers"])
    l_fixed = max((c["n_layers"] for c in cost if c["d_model"] != d_fixed), default=depth[0]["n_layers"])
    width = sorted((c for c in cost if c["n_layers"] == l_fixed), key=lambda c: c["d_model"])
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), layout="constrained")
    for ax, rows, key, label in ((axes[0], depth, "n_layers", f"blocks (d = {d_fixed})"),
                                 (axes[1], width, "d_model", f"width d ({l_fixed} blocks)")):  # fmt: skip
        xs = [r[key] for r in rows]
        ms = [1000 * r["median_s"] for r in rows]
        per_flop = ms[-1] / rows[-1]["flops_per_step"]
        ax.plot(xs, ms, "o-", color=plot.color("pre"), label="measured (pre-LN)")
        ax.plot(xs, [per_flop * r["flops_per_step"] for r in rows], "--", color="0.5", label="proportional to FLOPs")
        ax.set(xlabel=label, ylabel="ms per training step", xscale="log", yscale="log")
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.minorticks_off()
    axes[0].legend()
    threads = {c["threads"] for c in cost}
    fig.suptitle(f"Cost of one step, batch {cost[0]['batch']} x {cost[0]['seq']}, {threads.pop()} torch thread(s)")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _notebook_docs(app: Sphinx) -> list[str]:
    """Notebook chapters in table-of-contents order."""
    env = app.env
    order = [d for d in env.toctree_includes.get(env.config.root_doc, [])]
    return [d for d in order if str(env.doc2path(d)).endswith(".ipynb")]


def run_key() -> tuple[str, int]:
    """The scale and seed base this build executes at (what the chapters' `normlab` reads)."""
    from normlab.scale import get_scale, seed_base

    return get_scale(), seed_base()


# Files under book/_data that no chapter reads (the costs page and the README render them), so a
# new measurement there does not make every chapter run again.
NOT_CHAPTER_INPUTS = ("costs-", "bench-", "budget", "claim-rates", "board-spread", "estimate-")


def inputs_key() -> str:
    """A short hash of what a chapter's outputs depend on besides its own code, which is all the
    execution cache keys on: normlab's source, the boards that ship inside it and the stored results the
    chapters load, and how the boards are to be used (NORMLAB_BOARDS). A change to any gives a new cache,
    so a rebuild never shows outputs computed from an older package or an older stored board."""
    import hashlib

    from normlab.replay import board_path, mode
    from normlab.store import source_hash

    digest = hashlib.sha256(f"{source_hash()}\0{mode()}".encode())
    boards = sorted(board_path("x", "ci").parent.glob("*.json.xz"))
    for path in boards + sorted((ROOT / "book" / "_data").glob("*.json")):
        if not path.name.startswith(NOT_CHAPTER_INPUTS):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def cache_dir(root: Path) -> Path:
    """The execution cache this build uses: one per scale, seed base and inputs (`inputs_key`)."""
    scale, base = run_key()
    return root / f"{scale}-seed{base}-{inputs_key()}"


# The longest cell a chapter may run, per scale. A cpu build is long by design (a sweep cell takes
# minutes on 2 cores, and a busy laptop doubles it); no measured cell comes within a third of these
# on a 2x slower machine (the costs page has every chapter's time). NORMLAB_CELL_TIMEOUT overrides.
CELL_TIMEOUT = {"ci": 600, "cpu": 3600, "gpu": 3600}


def cell_timeout(scale: str) -> int:
    raw = os.environ.get("NORMLAB_CELL_TIMEOUT", "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"NORMLAB_CELL_TIMEOUT must be a whole number of seconds >= 1, got {raw!r}")
        return int(raw)
    return CELL_TIMEOUT[scale]


def per_run_cache(app: Sphinx, config: Any) -> None:
    """One execution cache per scale, seed base and inputs. Changing the path changes the configuration,
    so Sphinx re-reads (and myst-nb re-executes or re-uses) every chapter when the key changes.
    The cell timeout follows the scale too (`CELL_TIMEOUT`)."""
    scale, _ = run_key()
    config.nb_execution_cache_path = str(cache_dir(Path(app.outdir).parent / ".jupyter_cache"))
    config.nb_execution_timeout = cell_timeout(scale)


def failure_line(docname: str, error: str, tb: str, nb: nbformat.NotebookNode, timeout: int, scale: str) -> str:
    """One line that says which chapter and cell failed to execute, and why."""
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    shown = ""
    # nbclient quotes the cell between two rules of dashes: its first lines on a timeout
    # (CellTimeoutError), its source on an error (CellExecutionError).
    block = re.search(r"(?:preview of the cell contents|executing the following cell):\s*\n-+\n(.*?)\n-+", tb, re.S)
    shown = next((line for line in (block.group(1).splitlines() if block else []) if line.strip()), "")
    where = "a cell"
    for count, (_, cell) in enumerate(code, start=1):
        if shown and shown.strip() in cell.source:
            first = next(line for line in cell.source.splitlines() if line.strip())
            where = f"code cell {count} of {len(code)} (`{first.strip()[:60]}`)"
            break
    if error == "CellTimeoutError":
        why = (
            f"it ran past the {timeout} s cell limit of the {scale} scale (a busy or slow machine; "
            "NORMLAB_CELL_TIMEOUT raises it, and sweeps resume from NORMLAB_STORE when it is set)"
        )
    else:
        lines = [line for line in tb.strip().splitlines() if line.strip()]
        why = next((line.strip() for line in reversed(lines) if re.match(r"^\w+(Error|Exception|Interrupt)\b", line)),
                   lines[-1].strip() if lines else "no traceback")  # fmt: skip
    return f"normlab: {docname} failed in {where}: {error}: {why}"


def report_failed_execution(app: Sphinx, docname: str) -> None:
    """Right after a chapter executes (or fails to), say in one line where and why it failed."""
    from myst_nb.sphinx_ import NbMetadataCollector

    data = NbMetadataCollector.get_exec_data(app.env, docname)
    if not data or data.get("succeeded", True):
        # A report left by an earlier, interrupted or failed build of this chapter is stale now.
        (Path(app.outdir) / "reports" / f"{docname}.err.log").unlink(missing_ok=True)
        return
    scale, _ = run_key()
    source = nbformat.read(str(app.env.doc2path(docname)), as_version=4)
    line = failure_line(docname, data.get("error") or "error", data.get("traceback") or "", source,
                        app.config.nb_execution_timeout, scale)  # fmt: skip
    logger.warning(line + f"; report: _build/html/reports/{docname}.err.log", type="normlab", subtype="exec")


def _executed(app: Sphinx, docname: str) -> nbformat.NotebookNode | None:
    """The notebook as this build executed it or took it from the cache, outputs included.

    A cache hit is merged from the execution cache (myst-nb writes the notebook *without* its
    cached outputs to jupyter_execute/ then); a notebook that failed is not cached, and its
    partial outputs, errors included, are read from jupyter_execute/.
    """
    from jupyter_cache import get_cache

    source = nbformat.read(str(app.env.doc2path(docname)), as_version=4)
    try:
        return get_cache(app.config.nb_execution_cache_path).merge_match_into_notebook(source)[1]
    except KeyError:
        pass
    path = Path(app.outdir).parent / "jupyter_execute" / f"{docname}.ipynb"
    return nbformat.read(str(path), as_version=4) if path.exists() else None


def figure_output_problems(nb: nbformat.NotebookNode) -> list[str]:
    """Figure cells (``mystnb.figure`` metadata) that did not display exactly one output: myst-nb
    would give each of several outputs the figure's name (a progress-bar widget plus the image,
    say), which a strict build rejects only at the scale where it happens."""
    problems = []
    for index, cell in enumerate(nb.cells):
        figure = cell.get("metadata", {}).get("mystnb", {}).get("figure")
        shown = [
            o
            for o in cell.get("outputs", [])
            if o.get("output_type") in ("display_data", "execute_result")
            # myst-nb's glue records are stored as outputs but never displayed
            and not all(k.startswith("application/papermill.record/") for k in o.get("data", {}))
        ]
        if figure and len(shown) != 1:
            kinds = ", ".join(sorted({k for o in shown for k in o.get("data", {})})) or "none"
            problems.append(
                f"figure {figure.get('name')!r} (cell {index}) produced {len(shown)} display outputs ({kinds}); "
                "a figure cell must display exactly one image"
            )
    return problems


def check_figure_outputs(app: Sphinx, doctree: nodes.document) -> None:
    docname = app.env.docname
    if not str(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    report_failed_execution(app, docname)
    nb = _executed(app, docname)
    for problem in figure_output_problems(nb) if nb is not None else []:
        logger.warning(f"normlab: {problem}", location=docname)


def collect_claims(app: Sphinx) -> list[tuple[str, dict[str, Any]]]:
    scale, base = run_key()
    claims = []
    for docname in _notebook_docs(app):
        nb = _executed(app, docname)
        if nb is None:
            logger.warning(f"normlab: no executed copy of {docname}; its claims are missing")
            continue
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                record = output.get("metadata", {}).get(CLAIM_KEY)
                if not record:
                    continue
                if (record.get("scale"), record.get("seed_base", 0)) != (scale, base):
                    logger.warning(
                        f"normlab: claim {record['id']} in {docname} was measured at scale {record.get('scale')}, "
                        f"seed base {record.get('seed_base', 0)}, but this build is at scale {scale}, seed base {base}"
                    )
                claims.append((docname, record))
    return claims


def _table(header: list[str], rows: list[list[nodes.Node]], widths: list[int]) -> nodes.table:
    table = nodes.table(classes=["normlab-table", "colwidths-given"])
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


def _link(app: Sphinx, fromdoc: str, todoc: str, anchor: str = "") -> nodes.Node:
    title = app.env.titles[todoc].astext() if todoc in app.env.titles else todoc
    uri = app.builder.get_relative_uri(fromdoc, todoc) + (f"#{anchor}" if anchor else "")
    return nodes.reference(text=title, refuri=uri)


def _anchor_link(app: Sphinx, fromdoc: str, doc: str, claim: dict[str, Any]) -> nodes.Node:
    uri = app.builder.get_relative_uri(fromdoc, doc) + f"#claim-{claim['id']}"
    kind = claim.get("kind", "measured")
    word = {"measured": "holds", "identity": "identity", "cited": "cited"}.get(kind, kind)
    return nodes.reference(text=f"✓ {word}" if claim["holds"] else f"✗ FAILS ({kind})", refuri=uri)


def _sources_table(app: Sphinx, fromdoc: str) -> list[nodes.Node]:
    """One row per statement of the sources that a chapter checks: quote, verdict, our measurement."""
    rows, verdicts = [], {}
    for doc, c in collect_claims(app):
        if not c.get("source"):
            continue
        verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
        where = nodes.paragraph()
        where += _link(app, fromdoc, doc, f"claim-{c['id']}")
        rows.append(
            [
                nodes.Text(SOURCE_NAMES.get(c["source"], c["source"])),
                nodes.Text(f"\u201c{c['quote']}\u201d"),
                nodes.strong(text=c["verdict"]),
                nodes.Text(("" if c["holds"] else "✗ our check FAILED: ") + f"{c['statement']} ({c['measured']})"),
                where,
            ]
        )
    if not rows:
        return [nodes.paragraph(text="No chapter of this build checked a statement of the sources.")]
    tally = ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items()))
    summary = nodes.paragraph(text=f"{len(rows)} statements checked: {tally}.")
    header = ["source", "statement", "verdict", "what we measured", "where"]
    return [summary, _table(header, rows, [12, 27, 14, 35, 12])]


def _claims_table(app: Sphinx, fromdoc: str) -> list[nodes.Node]:
    claims = collect_claims(app)
    # Findings apart from identities (true by construction) and citations: only findings could fail.
    by_kind = {k: [c for _, c in claims if c.get("kind", "measured") == k] for k in ("measured", "identity", "cited")}
    held = {k: sum(1 for c in cs if c["holds"]) for k, cs in by_kind.items()}
    scales = sorted({c.get("scale", "?") for _, c in claims})
    bases = sorted({str(c.get("seed_base", 0)) for _, c in claims})
    summary = nodes.paragraph(
        text=f"{held['measured']} of {len(by_kind['measured'])} measured claims held when this book was built "
        f"(scale: {', '.join(scales) or 'none'}; seed base: {', '.join(bases) or 'none'}); besides them, "
        f"{held['identity']} of {len(by_kind['identity'])} identities (true by construction, shown numerically: "
        f'the result column says "identity") and {held["cited"]} of {len(by_kind["cited"])} citation checks '
        '("cited") held.'
    )
    rates = _claim_rates(app)
    out: list[nodes.Node] = [summary, _rates_summary(rates)]
    for doc in dict.fromkeys(d for d, _ in claims):  # chapters in order, once each
        out.append(nodes.paragraph("", "", nodes.strong("", "", _link(app, fromdoc, doc))))
        rows = [
            [
                nodes.paragraph("", "", _anchor_link(app, fromdoc, d, c)),
                nodes.Text(c["statement"]),
                nodes.Text(c["measured"]),
                nodes.Text(_rate_text(rates["claims"].get(c["id"])) if rates else "not measured"),
            ]
            for d, c in claims
            if d == doc
        ]
        out.append(_table(["result", "claim", "measured", "held at ci"], rows, [9, 40, 38, 13]))
    return out


def _claim_rates(app: Sphinx) -> dict[str, Any] | None:
    """book/_data/claim-rates-ci.json: how often each claim held over many seed bases at the ci scale."""
    path = Path(app.srcdir) / "book" / "_data" / "claim-rates-ci.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())  # no dependency to note: GENERATED pages are rewritten every build


def _rate_text(row: dict[str, Any] | None) -> str:
    if row is None:
        return "not measured"
    return f"{row['held']} of {row['bases']} seed bases ({100 * row['rate']:.0f}%)"


def _rates_summary(rates: dict[str, Any] | None) -> nodes.Node:
    """What the last column means, with its own provenance."""
    if rates is None:
        return nodes.paragraph(text="No pass rates over seed bases have been measured for this build.")
    bases = sorted({b for ch in rates["chapters"].values() for b in ch["bases"]})
    pythons = sorted({p for ch in rates["chapters"].values() for p in ch["python"]})
    if not bases:
        return nodes.paragraph(text="No pass rates over seed bases have been measured for this build.")
    unmeasured = [  # the count each chapter needs is the table's (scripts/claim_rates.py bases_needed)
        f"{ch} ({len(row['bases'])} of {row['bases_needed']})" if row["bases"] else ch
        for ch, row in rates["chapters"].items()
        if len(row["bases"]) < row["bases_needed"]
    ]
    return nodes.paragraph(
        text="The last column is a claim's pass rate: at how many fresh seed bases it held (each chapter has its "
        f"own set, between {bases[0]} and {bases[-1]}, none of them used to choose the claim's wording), each "
        f"chapter executed whole at the ci scale on Python {' and '.join(pythons)} (scripts/claim_rates.py; a "
        "claim must hold at 95% of them or more, tested; those that do not yet are listed in "
        "book/_data/claims-below-95.json). At the book's own seeds it is the first column."
        + (
            f" Not yet measured at the seed bases they need (10, or 20 for a chapter that executes in under "
            f"two minutes) of their current code (the rates shown are partial): "
            f"{', '.join(unmeasured)}."
            if unmeasured
            else ""
        )
        + "".join(
            f" {ch}: the records of code {n['from_code']} count for its current code, because the current "
            f"code executed at base {n['checked_at_base']} reproduced that base's record claim for claim "
            "(scripts/claim_rates.py carry)."
            for ch, row in rates["chapters"].items()
            for n in row.get("carried", [])
        )
    )


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
    estimate = _gpu_estimate(app) if "gpu" not in runs else None
    if estimate is not None:  # no GPU has measured the gpu scale: its modelled time, said as such
        for doc, row in zip(docs, rows):
            minutes = estimate["chapters"].get(doc.removeprefix("book/"), {}).get("estimated_min")
            row.append(nodes.Text("" if minutes is None else f"about {minutes:.0f} min"))
        rows[-1].append(nodes.strong(text=f"about {estimate['total_min']:.0f} min"))
    header = ["chapter"] + [f"{scale} scale" for scale in runs]
    header += ["gpu scale, Colab T4: ESTIMATE"] if estimate else []
    out: list[nodes.Node] = [_table(header, rows, [34] + [66 // (len(header) - 1)] * (len(header) - 1))]
    items = nodes.bullet_list()
    for scale, run in runs.items():
        p = run["provenance"]
        text = (
            f"{scale}: measured {p['date']} on {p['device']} ({p['threads']} torch thread(s), torch {p['torch']}, "
            f"Python {p['python']}), normlab at {p['revision']}; each notebook executed once, end to end."
        )
        items += nodes.list_item("", nodes.paragraph(text=text))
    if estimate is not None:
        before = {ch: c["before"]["estimated_min"] for ch, c in estimate["chapters"].items()}
        text = (
            f"gpu: not measured (no GPU has run this book yet); estimated by {estimate['made_by']} from the runs, "
            f"steps and FLOPs of each chapter at that scale and the kernels a training step launches (counted on "
            f"the CPU), for a T4 at {100 * estimate['assumptions']['sustained_fraction']:.0f}% of its float32 peak "
            f"and {1e6 * estimate['assumptions']['seconds_per_op']:.0f} microseconds per launched kernel. At its "
            f"first, larger sizes the gpu scale was estimated at {sum(before.values()):.0f} minutes in all "
            f"(chapter 9 alone {before.get('09_leaderboard', 0):.0f}): a Colab reader should wait about 10 "
            "minutes for a chapter, so chapters 3 to 9 now run their sweeps at the cpu sizes there and show the "
            "cpu boards. bash scripts/measure_gpu.sh on a GPU measures it and replaces this column."
        )
        items += nodes.list_item("", nodes.paragraph(text=text))
    out.append(items)
    return out


COURSE = {"book/01_post_ln", "book/02_pre_ln", "book/03_gradients_at_init", "book/04_warmup"}


def _path_table(app: Sphinx, fromdoc: str) -> list[nodes.Node]:
    """Each chapter's part and its lesson's reading time, measured by scripts/reading_stats.py on the
    notebooks being built, and what executing it cost at the cpu scale (book/_data/costs-cpu.json)."""
    sys.path.insert(0, str(Path(app.srcdir) / "scripts"))
    import reading_stats

    costs_path = Path(app.srcdir) / "book" / "_data" / "costs-cpu.json"
    costs = json.loads(costs_path.read_text())["seconds"] if costs_path.exists() else {}
    rows = []
    for doc in _notebook_docs(app):
        s = reading_stats.stats(doc.removeprefix("book/"))
        part = "the course" if doc in COURSE else ("start here" if doc.endswith("quickstart") else "beyond it")
        seconds = costs.get(doc)
        cost = "" if seconds is None else f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
        rows.append([_link(app, fromdoc, doc), nodes.Text(part),
                     nodes.Text(f"{s['reading_minutes']} min ({s['prose_words']:,} words)"),
                     nodes.Text(cost)])  # fmt: skip
    header = ["chapter", "part", "lesson: reading time", "running it at the cpu scale"]
    return [_table(header, rows, [40, 14, 26, 20])]


def _gpu_estimate(app: Sphinx) -> dict[str, Any] | None:
    """book/_data/estimate-gpu.json (scripts/estimate_gpu.py): each chapter's modelled time on a Colab T4."""
    path = Path(app.srcdir) / "book" / "_data" / "estimate-gpu.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())  # no dependency to note: GENERATED pages are rewritten every build


def resolve(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for node in doctree.findall(claims_placeholder):
        node.replace_self(_claims_table(app, docname))
    for node in doctree.findall(costs_placeholder):
        node.replace_self(_costs_table(app, docname))
    for node in doctree.findall(sources_placeholder):
        node.replace_self(_sources_table(app, docname))
    for node in doctree.findall(path_placeholder):
        node.replace_self(_path_table(app, docname))


def always_outdated(app: Sphinx, env: Any, added: set, changed: set, removed: set) -> list[str]:
    # The generated pages depend on every chapter's results: rewrite them on every build.
    return [d for d in GENERATED if d in env.found_docs]


def claim_role(name, rawtext, text, lineno, inliner, options=None, content=None):  # noqa: ANN001, ANN201
    """{claim}`ch8-loss-degrades`: a superscript check mark after the sentence it backs, linked to that
    claim's check in the chapter's evidence (its output carries the anchor claim-<id>, normlab.claims)."""
    cid = text.strip()
    ref = nodes.reference(rawtext, "✓", refuri=f"#claim-{cid}", reftitle=f"checked: claim {cid}")
    return [nodes.superscript("", "", ref, classes=["normlab-claim"])], []


def setup(app: Sphinx) -> dict[str, Any]:
    import reply_watch  # beside this file: _ext is on the path of a local extension

    reply_watch.install()  # nbclient's wait for a cell's reply, unable to hang (see that module)
    app.add_node(claims_placeholder)
    app.add_node(costs_placeholder)
    app.add_directive("normlab-claims", ClaimsDirective)
    app.add_directive("normlab-costs", CostsDirective)
    app.add_directive("normlab-bench", BenchDirective)
    app.add_node(sources_placeholder)
    app.add_node(path_placeholder)
    app.add_directive("normlab-path", PathDirective)
    app.add_directive("normlab-sources", SourcesDirective)
    app.add_role("claim", claim_role)
    app.connect("config-inited", per_run_cache)
    app.connect("env-get-outdated", always_outdated)
    app.connect("doctree-read", check_figure_outputs)
    app.connect("doctree-resolved", resolve)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
