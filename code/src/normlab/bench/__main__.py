"""python -m normlab.bench: measure, print the tables, optionally write the JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..results import _round
from ..scale import get_device
from .run import _resolve_args, run_benchmark
from .steps import SIZES
from .table import format_table


def _csv(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            return [kind(part.strip()) for part in text.split(",") if part.strip()]
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"not a comma-separated list: {text!r}") from err

    return parse


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """The command line: measure, print the tables, optionally write the JSON."""
    ap = argparse.ArgumentParser(prog="python -m normlab.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=_csv(str), help=f"comma-separated, of {', '.join(SIZES)} (default ci,cpu; +gpu)")
    ap.add_argument("--threads", type=_csv(int), help="comma-separated torch thread counts (default 1,2)")
    ap.add_argument("--repeats", type=int, help="interleaved repeats per measurement (default 11; 3 with --quick)")
    ap.add_argument("--quick", action="store_true", help="a smoke test: ci size, one thread, a small sweep")
    ap.add_argument("--out", type=Path, help="write every number and its provenance to this JSON file")
    args = ap.parse_args(argv)
    try:
        _resolve_args(args.sizes, args.threads, args.repeats, quick=args.quick, device=get_device())
    except ValueError as err:
        ap.error(str(err))  # a usage error, before minutes of measuring
    result = run_benchmark(
        args.sizes, args.threads, args.repeats, quick=args.quick, log=lambda line: print(line, file=sys.stderr)
    )
    print(format_table(result))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(_round(result), indent=1, allow_nan=False) + "\n")
        print(f"\nwrote {args.out}")
    return result


if __name__ == "__main__":
    main()
