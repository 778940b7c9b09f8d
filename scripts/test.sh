#!/usr/bin/env bash
# The test command: lint, the package tests, the book checks (including the simulated Colab
# install), every chapter under nbval at the ci scale, a strict build of the book (warnings are
# errors), and a browser check of every built page. Run from anywhere; it works in the repo root.
set -euo pipefail
cd "$(dirname "$0")/.."
# One torch thread per process: these machines give about one core under load, and spinning
# OpenMP threads can slow a run tenfold. The ci scale keeps every notebook to about a minute.
export NORMLAB_SCALE=ci OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
ruff check .
ruff format --check .
# The strict build executes every chapter too: it runs on the second core while pytest (and
# nbval) run on the first, and its log is printed when both are done.
mkdir -p _build
jupyter-book build -W -n --keep-going . > _build/build.log 2>&1 &
build=$!
tests=0
python -m pytest --nbval-lax --nbval-current-env || tests=$?
built=0
wait "$build" || built=$?
echo "== jupyter-book build -W -n --keep-going . (exit $built) =="
tail -n 40 _build/build.log
if [ "$built" -ne 0 ]; then
    grep -E "WARNING|ERROR|Error" _build/build.log | head -n 60 || true
fi
[ "$tests" -eq 0 ] && [ "$built" -eq 0 ]
python scripts/check_site.py
