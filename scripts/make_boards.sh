#!/usr/bin/env bash
# The stored boards, made again: each chapter named (default: the main sweeps of chapters 4 to 9,
# each) trained live by its own notebook at each scale in
# NORMLAB_BOARD_SCALES (default "ci cpu"), seed base 0, and saved with its provenance and its runs'
# early fingerprints (the chapters' maintainer cells, NORMLAB_RESULTS_DIR), then copied to the boards
# that ship inside normlab, code/src/normlab/boards/ (xz-compressed). Run it from a clean
# checkout (the provenance records the revision and whether normlab's source had uncommitted
# changes). Usage: scripts/make_boards.sh [chapter ...], e.g. scripts/make_boards.sh 07_normformer
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
unset NORMLAB_SEED_BASE  # the seeds CI uses
# Every run is trained by this invocation and kept in a store of its own, so that an interrupted
# invocation resumes where it stopped when given the same NORMLAB_BOARD_STORE (an nbclient run here
# has waited forever on a kernel that had finished its cell: an open defect, seen with ipykernel 7.4 and 6.31).
export NORMLAB_STORE="${NORMLAB_BOARD_STORE:-$out/store}"
chapters=("$@")
[ ${#chapters[@]} -gt 0 ] || chapters=(04_warmup 05_deepnorm 06_sandwich 07_normformer 08_qk_norm 09_leaderboard)
for scale in ${NORMLAB_BOARD_SCALES:-ci cpu}; do
    for chapter in "${chapters[@]}"; do
        if [ "$chapter" = 09_leaderboard ]; then
            # Chapter 9's boards are rounds, each chosen from the one before: made by their own script
            # (the long budget, one board for every scale, only with NORMLAB_BOARD_LONG=1: hours of CPU).
            long=(); [ "${NORMLAB_BOARD_LONG:-0}" = 1 ] && [ "$scale" = cpu ] && long=(--long)
            OMP_NUM_THREADS=1 python scripts/make_leaderboard.py --scale "$scale" "${long[@]}" \
                --store "$NORMLAB_STORE" --out code/src/normlab/boards
            continue
        fi
        start=$(date +%s)
        mkdir -p "$out/$scale"
        NORMLAB_SCALE=$scale NORMLAB_RESULTS_DIR="$out/$scale" OMP_NUM_THREADS=1 \
            python scripts/execute_chapter.py "$chapter" "$out/$scale/$chapter.ipynb"
        echo "make_boards: $chapter at $scale: $(( $(date +%s) - start )) s"
    done
    cp "$out/$scale"/*.json.xz code/src/normlab/boards/
done
ls -l code/src/normlab/boards/
echo "make_boards: boards written to code/src/normlab/boards/ (work files in $out)"
