#!/usr/bin/env bash
# The test command: lint, the package tests, the book checks (including the simulated Colab
# install), every chapter under nbval at the ci scale, a strict build of the book (warnings are
# errors), and a browser check of every built page. Run from anywhere; it works in the repo root.
set -euo pipefail
cd "$(dirname "$0")/.."
# One torch thread: these machines give about one core under load, and spinning OpenMP threads
# can slow a run tenfold. The ci scale keeps every notebook short.
export NORMLAB_SCALE=ci OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# A stored board whose early check fails is an error here, not a labelled page: a change to the code
# that made a board must come with the board made again (scripts/make_boards.sh).
export NORMLAB_BOARDS=strict
ruff check .
ruff format --check .
# Two pytest workers (pytest-xdist), each test file (each chapter) whole on one of them: most of
# the time goes to kernels that compute in-process on one thread, so two at once use both cores.
python -m pytest --nbval-lax --nbval-current-env --nbval-cell-timeout=600 -n 2 --dist loadfile --durations=25
# nbval has just executed every chapter and handed each passing one to the build's execution cache
# (book/conftest.py), so the strict build renders those outputs instead of executing them again; a
# chapter that failed under nbval is executed (and fails) here too.
jupyter-book build -W -n --keep-going .
python scripts/check_site.py
