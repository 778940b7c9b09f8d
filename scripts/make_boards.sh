#!/usr/bin/env bash
# The stored cpu boards, made again: chapter 4's warmup grid and chapter 9's leaderboard, each
# trained live at the cpu scale by its own chapter and saved with its provenance (the chapters'
# maintainer cells, NORMLAB_RESULTS_DIR), then copied to book/_data/. Run it from a clean checkout
# (the provenance records the revision and whether normlab's source had uncommitted changes);
# about 7 and 12 minutes on 2 quiet cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
unset NORMLAB_STORE  # every run trained now, none loaded
for chapter in 04_warmup 09_leaderboard; do
    NORMLAB_SCALE=cpu NORMLAB_RESULTS_DIR="$out" OMP_NUM_THREADS=1 jupyter nbconvert --to notebook --execute \
        --ExecutePreprocessor.timeout=3600 --output-dir "$out" "book/$chapter.ipynb"
done
cp "$out"/warmup-grid-cpu.json "$out"/leaderboard-cpu.json book/_data/
echo "make_boards: book/_data/warmup-grid-cpu.json and leaderboard-cpu.json written (work files in $out)"
