"""Every claim's pass rate over many seed bases: execute the chapters at the ci scale at each base
with NORMLAB_CLAIMS=record (a failing claim is recorded, not raised), then tabulate how often each held.

    python scripts/claim_rates.py run --bases 3000:5000:100 [--chapters 04_warmup ...] [--store DIR]
    python scripts/claim_rates.py table          # writes book/_data/claim-rates-ci.json
    python scripts/claim_rates.py status         # which chapters' records are of their current code
    python scripts/claim_rates.py carry CHAPTER --check DIR   # older records whose code change is checked inert

`run` is resumable: each (chapter, base) is one file in the store (default .claim-sweep/), written when
that execution ends, and a rerun skips every file whose chapter code is the chapter's code now. Run it in
the background, one process per core you can spare (`taskset -c 1 python ...` keeps it to one core: its
sweeps then train in-process). A chapter 9 base takes 15-30 minutes; with `NORMLAB_STORE=DIR` in the
environment its sweeps keep each finished run there (keyed by seed, config and code), so a base cut off by
a timeout or the end of a session resumes from its finished runs instead of starting over. `table` reads
the store and keeps, per chapter, only executions of the chapter's current code (`code_fingerprint`), so a
rate never describes code that has since changed.
`carry` is the one exception, and it is measured: when the current code, executed at one of the older
records' bases (`run --store DIR`), reproduces that record's every claim exactly (id, measured text,
verdict, values), the change did not touch what the claims compute (a figure's layout, another scale's
sizes), and the older records of that code are restamped with the current code and a `carried` note.
Never use it after a claim's condition changed: an older verdict answers the older condition.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
TABLE = BOOK / "_data" / "claim-rates-ci.json"
CLAIM_KEY = "normlab_claim"
CHEAP_SECONDS = 120  # a chapter that executes in under two minutes at ci is measured at 20 bases, not 10


def chapters() -> list[str]:
    return sorted(p.stem for p in BOOK.glob("*.ipynb"))


def _is_text(line: str) -> bool:
    """A line that is only a string (a claim's sentence, a print's words): it says, it does not compute."""
    try:
        tree = ast.parse(line.rstrip(",").strip())
    except SyntaxError:
        return False
    return (len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr)
            and isinstance(tree.body[0].value, (ast.Constant, ast.JoinedStr))
            and isinstance(getattr(tree.body[0].value, "value", ""), str))  # fmt: skip


def code_fingerprint(chapter: str, path: Path | None = None) -> str:
    """The chapter's code as what it computes: its code lines as a sorted multiset, without comments, blank
    lines and lines that are only a string (a claim's wording: the condition is what a seed base tests), so
    moving a cell, splitting one in two or rewording a claim keeps it, while any edit to code changes it.
    ``path``: another copy of the chapter (an executed one), instead of book/<chapter>.ipynb."""
    return fingerprint_of(nbformat.read(path or BOOK / f"{chapter}.ipynb", as_version=4))


def fingerprint_of(nb: nbformat.NotebookNode) -> str:
    lines = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            for line in cell.source.splitlines():
                line = line.strip()
                if line and not line.startswith("#") and not _is_text(line):
                    lines.append(line)
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:16]


def _revision() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        return rev.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def execute(chapter: str, base: int, timeout: int) -> dict:
    """One execution of ``chapter`` at the ci scale and seed base ``base``; every claim and every error."""
    sys.path.insert(0, str(ROOT / "_ext"))
    import reply_watch  # the build's guard against a lost reply (_ext/reply_watch.py)
    from nbclient import NotebookClient

    reply_watch.install()
    os.environ.update(NORMLAB_SCALE="ci", NORMLAB_SEED_BASE=str(base), NORMLAB_CLAIMS="record")
    nb = nbformat.read(BOOK / f"{chapter}.ipynb", as_version=4)
    code = fingerprint_of(nb)  # of the copy executed (the file may change while it runs)
    # A last cell, after the fingerprint: how many runs came from a run store (NORMLAB_STORE), so a resumed
    # execution's time is not read as a fresh one's (bases_needed).
    nb.cells.append(nbformat.v4.new_code_cell("import normlab.sweep\nprint(normlab.sweep.runs_from_store)"))
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(BOOK)}})  # fmt: skip
    failure = None
    try:
        client.execute()
    except Exception as error:  # a timeout or a dead kernel: record what ran
        failure = f"{type(error).__name__}: {str(error)[:300]}"
    last = [o for o in nb.cells[-1].get("outputs", []) if o.get("name") == "stdout"]
    from_store = int(last[0]["text"].split()[-1]) if last else None
    nb.cells.pop()
    claims, errors = [], []
    for index, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        for out in cell.get("outputs", []):
            record = out.get("metadata", {}).get(CLAIM_KEY)
            if record:
                claims.append({k: record[k] for k in ("id", "statement", "measured", "holds", "kind", "values")})
            if out.get("output_type") == "error":
                errors.append({"cell": index, "error": f"{out['ename']}: {out['evalue'][:300]}"})
    import torch

    return {"chapter": chapter, "base": base, "scale": "ci", "code": code,
            "seconds": round(time.perf_counter() - start, 1), "failure": failure, "errors": errors,
            "runs_from_store": from_store, "claims": claims, "python": platform.python_version(),
            "torch": torch.__version__,
            "revision": _revision(), "date": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip


def bases_needed(min_seconds: float | None) -> int:
    """The rule of issue 45: 20 seed bases for a chapter that executes in under two minutes at a fresh seed
    base, 10 for the others (at a fresh base a chapter trains its stored boards' sweeps again). Its fastest
    recorded execution is the measure: the sweeps shared the machine, and the slower ones waited for it. An
    execution that took runs from a run store (`runs_from_store` above 0) timed a replay, so it is not read."""
    return 20 if (min_seconds or float("inf")) < CHEAP_SECONDS else 10


def parse_bases(text: str) -> list[int]:
    """'3000:5000:100' (a range) or '3000,3100' (a list)."""
    if ":" in text:
        start, stop, step = (int(x) for x in text.split(":"))
        return list(range(start, stop, step))
    return [int(x) for x in text.split(",")]


def run(args: argparse.Namespace) -> None:
    store = Path(args.store)
    names = args.chapters or chapters()
    unknown = sorted(set(names) - set(chapters()))
    if unknown:
        sys.exit(f"unknown chapters {unknown}; valid choices: {', '.join(chapters())}")
    for base in parse_bases(args.bases):
        for chapter in names:
            path = store / chapter / f"{base}.json"
            if path.exists() and json.loads(path.read_text())["code"] == code_fingerprint(chapter):
                continue
            record = execute(chapter, base, args.timeout)
            interrupted = [e for e in record["errors"] if e["error"].startswith("KeyboardInterrupt")]
            if record["failure"] or interrupted:  # a timeout, a dead or interrupted kernel: not a measurement
                print(f"{chapter} base {base}: not stored ({record['failure'] or interrupted[0]['error']})", flush=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(record, indent=1))
            tmp.replace(path)
            failed = [c["id"] for c in record["claims"] if not c["holds"]]
            print(f"{chapter} base {base}: {len(record['claims'])} claims, {record['seconds']:.0f} s, "
                  f"failed {failed or 'none'}, errors {len(record['errors'])}", flush=True)  # fmt: skip


def current_records(store: Path) -> dict[str, list[dict]]:
    """Per chapter, the stored executions of its current code, by base."""
    out = {}
    for chapter in chapters():
        code = code_fingerprint(chapter)
        records = [json.loads(p.read_text()) for p in sorted((store / chapter).glob("*.json"))]
        out[chapter] = sorted((r for r in records if r["code"] == code), key=lambda r: r["base"])
    return out


def table(args: argparse.Namespace) -> None:
    records = current_records(Path(args.store))
    rates = {}
    for chapter, runs in records.items():
        for run_ in runs:
            for c in run_["claims"]:
                entry = rates.setdefault(c["id"], {"chapter": chapter, "kind": c["kind"], "statements": Counter(),
                                                   "bases": [], "held": [], "measured": {}})  # fmt: skip
                entry["statements"][c["statement"]] += 1
                entry["bases"].append(run_["base"]), entry["held"].append(bool(c["holds"]))
                entry["measured"][str(run_["base"])] = c["measured"]
        for run_ in runs:  # a claim an execution never reached (an error before it) counts as failed there
            seen = {c["id"] for c in run_["claims"]}
            for cid, entry in rates.items():
                if entry["chapter"] == chapter and cid not in seen and run_["base"] not in entry["bases"]:
                    entry["bases"].append(run_["base"]), entry["held"].append(False)
                    entry["measured"][str(run_["base"])] = "not reached: " + "; ".join(
                        e["error"][:120] for e in run_["errors"][:2]) if run_["errors"] else "not reached"  # fmt: skip
    claims = {}
    for cid, e in sorted(rates.items()):
        n, k = len(e["held"]), sum(e["held"])
        claims[cid] = {"chapter": e["chapter"], "kind": e["kind"], "held": k, "bases": n, "rate": round(k / n, 3),
                       "statement": e["statements"].most_common(1)[0][0],
                       "statements_differ": len(e["statements"]) > 1,
                       "failed_at": {b: e["measured"][str(b)] for b, h in zip(e["bases"], e["held"]) if not h},
                       }  # fmt: skip
    chapters_ = {ch: {"code": runs[0]["code"] if runs else None, "bases": [r["base"] for r in runs],
                      "python": sorted({r["python"] for r in runs}), "torch": sorted({r["torch"] for r in runs}),
                      "carried": [json.loads(n) for n in sorted({json.dumps(r["carried"], sort_keys=True)
                                                                 for r in runs if "carried" in r})],
                      "median_seconds": sorted(r["seconds"] for r in runs)[len(runs) // 2] if runs else None,
                      "min_seconds": min((r["seconds"] for r in runs if not r.get("runs_from_store")),
                                         default=None)}
                 for ch, runs in records.items()}  # fmt: skip
    for row in chapters_.values():
        row["bases_needed"] = bases_needed(row["min_seconds"])
    out = {"scale": "ci", "command": "python scripts/claim_rates.py run --bases <bases>; "
           "python scripts/claim_rates.py table", "chapters": chapters_, "claims": claims}  # fmt: skip
    Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    low = {cid: f"{c['held']}/{c['bases']}" for cid, c in claims.items() if c["rate"] < 0.95}
    print(f"{len(claims)} claims; below 95%: {low or 'none'}")


def status(args: argparse.Namespace) -> None:
    store = Path(args.store)
    for chapter in chapters():
        code = code_fingerprint(chapter)
        records = [json.loads(p.read_text()) for p in sorted((store / chapter).glob("*.json"))]
        now = [r["base"] for r in records if r["code"] == code]
        print(f"{chapter:24s} {len(now):3d} bases of its current code, {len(records) - len(now)} of older code")


def _claims_key(record: dict) -> list:
    return sorted((c["id"], c["kind"], c["measured"], bool(c["holds"]), json.dumps(c["values"], sort_keys=True))
                  for c in record["claims"])  # fmt: skip


def carry(args: argparse.Namespace) -> None:
    store, chapter = Path(args.store), args.chapter
    code = code_fingerprint(chapter)
    check = json.loads((Path(args.check) / chapter / f"{args.base}.json").read_text())
    older = json.loads((store / chapter / f"{args.base}.json").read_text())
    if check["code"] != code:
        sys.exit(f"the check record is of code {check['code']}, not the chapter's current {code}")
    if _claims_key(check) != _claims_key(older) or check["errors"] or older["errors"]:
        sys.exit(f"base {args.base}: the current code's claims differ from code {older['code']}'s: not carried")
    note = {"from_code": older["code"], "checked_at_base": args.base, "check_revision": check["revision"],
            "date": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip
    # The older record's time stays: it is that base's fresh execution, which the rule of bases_needed reads;
    # the check may have loaded its training runs from NORMLAB_STORE (the same key: the same runs).
    check.update(seconds=older["seconds"], check_seconds=check["seconds"])
    (store / chapter / f"{args.base}.json").write_text(json.dumps(check, indent=1))
    carried = []
    for path in sorted((store / chapter).glob("*.json")):
        record = json.loads(path.read_text())
        if record["code"] == older["code"]:
            record.update(code=code, carried=note)
            path.write_text(json.dumps(record, indent=1))
            carried.append(record["base"])
    print(f"{chapter}: base {args.base} reproduced claim for claim; carried bases {carried} from {older['code']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="execute chapters at seed bases, storing their claims")
    p.add_argument("--bases", required=True, help="start:stop:step or a comma-separated list")
    p.add_argument("--chapters", nargs="*", help=f"default: all ({', '.join(chapters())})")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per cell")
    for q in (p, sub.add_parser("table", help="tabulate the pass rates"), sub.add_parser("status")):
        q.add_argument("--store", default=str(ROOT / ".claim-sweep"))
    sub.choices["table"].add_argument("--out", default=str(TABLE))
    q = sub.add_parser("carry", help="restamp older records whose code change a check execution shows inert")
    q.add_argument("chapter", choices=chapters())
    q.add_argument("--check", required=True, help="a store holding the current code's execution at --base")
    q.add_argument("--base", type=int, required=True, help="a base the older records hold too")
    q.add_argument("--store", default=str(ROOT / ".claim-sweep"))
    args = parser.parse_args()
    {"run": run, "table": table, "status": status, "carry": carry}[args.command](args)


if __name__ == "__main__":
    main()
