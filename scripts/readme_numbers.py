"""The README's measured numbers, written from the stored measurements so they cannot go stale.

    python scripts/readme_numbers.py            # rewrite the README's generated blocks
    python scripts/readme_numbers.py --check    # exit 1 if they differ (tests/test_readme.py)
    python scripts/readme_numbers.py --ci-log ci.log   # first store a clean-clone `.ci/run`'s times
    python scripts/readme_numbers.py --time-rebuild    # first time a rebuild of the built book

Each block sits between `<!-- generated: NAME -->` and `<!-- end generated -->` in README.md and
comes from `book/_data/`: `bench-cpu.json` (python -m normlab.bench), `costs-<scale>.json`
(scripts/measure_costs.py), `budget.json` (the times of `.ci/run` and of a cached rebuild,
recorded here from their logs).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "book" / "_data"
README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- generated: (\w+) -->\n)(.*?)(<!-- end generated -->)", re.S)


def _load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def bench() -> str:
    result = _load("bench-cpu.json")
    p = result["provenance"]
    lines = [
        f"Measured on {result['device']}, torch {p['torch']}, medians of {result['repeats']} interleaved repeats "
        f"({p['date'][:10]}, {p['revision']}):",
        "",
        "| size (d, blocks, B x T) | threads | model ratio | model ratio, fused AdamW | fused AdamW gain: normlab "
        "| fused AdamW gain: torch | % of matmul |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["steps"]:
        lines.append(
            f"| {r['size']} ({r['d_model']}, {r['n_layers']}, {r['batch']} x {r['seq']}) | {r['threads']} "
            f"| {r['ratio']:.2f} | {r['ratio_fused']:.2f} | {r['fused_gain']['normlab']:.2f} "
            f"| {r['fused_gain']['torch']:.2f} | {100 * r['models']['normlab']['fraction_of_matmul']:.0f}% |"
        )
    s = result["sweep"]
    same = "identical losses" if s["losses_identical"] else f"losses within {s['max_abs_loss_diff']:.1e}"
    lines += [
        "",
        f"A sweep of {s['runs']} runs on 2 worker processes ran {s['speedup']:.2f}x faster than on one, with {same}.",
    ]
    return "\n".join(lines) + "\n"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} minutes" if seconds >= 90 else f"{seconds:.0f} s"


def budget() -> str:
    b = _load("budget.json")
    ci, cpu = _load("costs-ci.json"), _load("costs-cpu.json")
    top = sorted(cpu["seconds"].items(), key=lambda kv: -kv[1])[:2]
    names = {"book/09_leaderboard": "the leaderboard chapter", "book/04_warmup": "the warmup chapter"}
    worst_ci = max(ci["seconds"].items(), key=lambda kv: kv[1])
    c = b["ci_run"]
    return (
        f"- **The budget**, measured on a fresh clone ({c['machine']}, 1 torch thread per process): `.ci/run` "
        f"took {c['total_s']:.0f} s ({c['date']}, {c['revision']}; set-up {c['setup_s']:.0f} s, pytest "
        f"{c['pytest_s']:.0f} s for {c['tests']} tests on 2 pytest workers, then the strict build from nbval's "
        f"executions and the browser check; budget 720 s). At ci the slowest chapter is "
        f"{worst_ci[0].removeprefix('book/')} ({worst_ci[1]:.0f} s under nbval). At the reader's default scale "
        f"(cpu) a cold build's chapters add up to {sum(cpu['seconds'].values()) / 60:.1f} minutes "
        + (
            f"(the whole build, Sphinx included, {cpu['provenance']['build_wall_seconds'] / 60:.1f}) "
            if "build_wall_seconds" in cpu["provenance"]
            else ""
        )
        + f"({cpu['provenance']['date']}, {cpu['provenance']['revision']}, {cpu['provenance']['device']}; "
        "budget 30 minutes), "
        + ", ".join(f"{names.get(k, k.removeprefix('book/'))} {_minutes(v)}" for k, v in top)
        + f" of them; a rebuild of an unchanged book took {b['cached_rebuild']['seconds']:.1f} s "
        f"({b['cached_rebuild']['scale']} scale, every chapter from the execution cache; budget 10 s). "
        'The "What each chapter costs" page of the book has every chapter\'s time at each scale.\n'
    )


def loaded() -> str:
    d = _load("loaded-cpu.json")
    p, rows = d["provenance"], d["seconds"]
    cells = ", ".join(f"{ch.split('_')[0].lstrip('0')} {r['quiet']:.0f} s quiet and {r['loaded']:.0f} s loaded "
                      f"({r['loaded'] / r['quiet']:.2f}x)" for ch, r in sorted(rows.items()))  # fmt: skip
    worst = max(r["loaded"] / r["quiet"] for r in rows.values())
    return (
        f"- **Under load** ({p['date']}, {p['revision']}, cpu scale, {p['machine']}; {p['load']}): chapters {cells}; "
        f"the largest slow-down is {worst:.2f}x (budget 2x). Before the kernel's thread count was set, the same load "
        "slowed in-kernel chapters 8-11x.\n"
    )


GENERATORS = {"bench": bench, "budget": budget, "loaded": loaded}


def render(text: str) -> str:
    def fill(m: re.Match) -> str:
        name = m.group(2)
        if name not in GENERATORS:
            raise SystemExit(f"README.md: unknown generated block {name!r}; known: {', '.join(GENERATORS)}")
        return m.group(1) + GENERATORS[name]() + m.group(4)

    return BLOCK.sub(fill, text)


def record_ci_log(log: Path) -> None:
    """Store the times a clean-clone `CI=true bash .ci/run` printed (its `ci:` lines and pytest's summary)."""
    text = log.read_text(errors="replace")
    setup = re.search(r"ci: set-up took (\d+) s", text)
    total = re.search(r"ci: total (\d+) s", text)
    tests = re.search(r"=+ (\d+) passed.*? in ([\d.]+)s", text)
    if not (setup and total and tests):
        raise SystemExit(f"{log}: no `ci: set-up took`, `ci: total` or pytest summary line: not a finished .ci/run log")
    revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    path = DATA / "budget.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data["ci_run"] = {
        "total_s": int(total.group(1)),
        "setup_s": int(setup.group(1)),
        "tests": int(tests.group(1)),
        "pytest_s": float(tests.group(2)),
        "date": datetime.date.today().isoformat(),
        "revision": revision.stdout.strip(),
        "machine": "2 cores, no GPU",
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def time_rebuild() -> None:
    """Time `jupyter-book build -W -n --keep-going .` on a book built already (at $NORMLAB_SCALE, or the
    default scale) and store it: the rebuild a reader does after a change that touches no chapter."""
    import os
    import time

    from normlab import get_scale

    start = time.perf_counter()
    subprocess.run(["jupyter-book", "build", "-W", "-n", "--keep-going", "."], cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    seconds = time.perf_counter() - start
    path = DATA / "budget.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    threads = os.environ.get("OMP_NUM_THREADS", "normlab's 1")
    data["cached_rebuild"] = {"seconds": round(seconds, 1), "date": datetime.date.today().isoformat(),
                              "scale": get_scale(), "threads": threads}  # fmt: skip
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"cached rebuild: {seconds:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if README.md's generated blocks are out of date")
    ap.add_argument("--ci-log", type=Path, help="store the times of this `.ci/run` log first")
    ap.add_argument("--time-rebuild", action="store_true", help="time a rebuild of the built book first")
    args = ap.parse_args()
    if args.ci_log:
        record_ci_log(args.ci_log)
    if args.time_rebuild:
        time_rebuild()
    text = README.read_text()
    new = render(text)
    if args.check:
        if new != text:
            sys.exit("README.md's measured numbers differ from book/_data: run python scripts/readme_numbers.py")
        return
    README.write_text(new)


if __name__ == "__main__":
    main()
