"""Execute every chapter once at one scale and record the wall time of each, with provenance.

    OMP_NUM_THREADS=1 python scripts/measure_costs.py --scale cpu
    python scripts/measure_costs.py --scale cpu --from-build --build-seconds 1708  # after a cold build

writes book/_data/costs-<scale>.json, which the book's "What each chapter costs" page renders.
Run it on the machine you want to describe (a GPU runtime for --scale gpu). With ``--from-build``
it executes nothing and reads the times a cold build at that scale recorded in its execution cache
(``_build/.jupyter_cache/<scale>-seed0-<inputs>``, see ``_ext/normlab_book.py``): one cold build
then gives both the book and its costs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from execute_chapter import execute  # noqa: E402


def chapters() -> list[str]:
    toc = (ROOT / "_toc.yml").read_text()
    docs = re.findall(r"file:\s*(\S+)", toc)
    return [d for d in docs if (ROOT / f"{d}.ipynb").exists()]


def device() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    # The model name too: the same chapter took 1.4-2.1x longer on a 2.0 GHz Xeon than on the
    # machine of the previous costs page, so a time means little without the processor.
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{platform.machine()} CPU{f' ({model})' if model else ''}, {os.cpu_count()} cores"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", required=True, choices=["ci", "cpu", "gpu"])
    ap.add_argument("--only", nargs="*", help="chapter docnames to (re)measure; others keep their old values")
    ap.add_argument("--from-build", action="store_true", help="read the times of a cold build instead of executing")
    ap.add_argument("--build-seconds", type=float, help="with --from-build: that build's wall time, timed by you")
    args = ap.parse_args()
    if args.build_seconds is not None and not args.from_build:
        ap.error("--build-seconds describes a cold build: pass it with --from-build")
    os.environ["NORMLAB_SCALE"] = args.scale
    import torch

    from normlab.results import default_workers

    out = ROOT / "book" / "_data" / f"costs-{args.scale}.json"
    old = json.loads(out.read_text())["seconds"] if out.exists() and args.only else {}
    seconds = dict(old)
    if args.from_build:
        from jupyter_cache import get_cache

        sys.path.insert(0, str(ROOT / "_ext"))
        from normlab_book import cache_dir  # the cache this scale's build used (seed base 0)

        os.environ.pop("NORMLAB_SEED_BASE", None)
        records = get_cache(str(cache_dir(ROOT / "_build" / ".jupyter_cache"))).list_cache_records()
        timed = {Path(r.uri).resolve(): r.data.get("execution_seconds") for r in records}
        for doc in chapters():
            took = timed.get((ROOT / f"{doc}.ipynb").resolve())
            if took is None:
                sys.exit(f"{doc} has no execution time in the {args.scale} build's cache: build cold first")
            seconds[doc] = round(took, 1)
    for doc in [] if args.from_build else chapters():
        if args.only and doc not in args.only:
            continue
        _, took = execute(ROOT / f"{doc}.ipynb")  # as the build and the board runner execute a chapter
        seconds[doc] = round(took, 1)
        print(f"{doc}: {seconds[doc]} s", flush=True)
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    revision = git.stdout.strip()
    record = {
        "scale": args.scale,
        "seconds": seconds,
        "provenance": {
            "date": datetime.date.today().isoformat(),
            "device": device(),
            "threads": torch.get_num_threads(),
            "sweep_workers": default_workers(),  # run_many's worker processes, one torch thread each
            "torch": torch.__version__,
            "python": platform.python_version(),
            "revision": revision or "unknown",
        },
    }
    if args.build_seconds is not None:  # the whole build, Sphinx included (README's budget line)
        record["provenance"]["build_wall_seconds"] = round(args.build_seconds)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
