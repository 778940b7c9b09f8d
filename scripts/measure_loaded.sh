#!/usr/bin/env bash
# The reader's busy laptop, measured: execute chapters at one scale as the build does, first on a
# quiet machine, then beside one other process running a 1-thread torch training loop, and print
# each chapter's two times. Usage: scripts/measure_loaded.sh 01_post_ln 02_pre_ln ...
# (NORMLAB_SCALE, default cpu). The README's "Under load" line comes from book/_data/loaded-cpu.json.
set -euo pipefail
cd "$(dirname "$0")/.."
export NORMLAB_SCALE=${NORMLAB_SCALE:-cpu}
out=$(mktemp -d)
busy() {
    python - <<'PY'
import time
import torch
torch.set_num_threads(1)
m = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 512))
opt, x = torch.optim.AdamW(m.parameters()), torch.randn(256, 512)
end = time.time() + 3600
while time.time() < end:
    loss = m(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
PY
}
for mode in quiet loaded; do
    if [ "$mode" = loaded ]; then busy & BUSY=$!; sleep 2; fi
    for chapter in "$@"; do
        start=$(date +%s.%N)
        NORMLAB_STORE=$(mktemp -d) python scripts/execute_chapter.py "$chapter" "$out/$chapter.$mode.ipynb" >"$out/$chapter.$mode.log" 2>&1
        echo "$mode $chapter $(python -c "print(round($(date +%s.%N) - $start, 1))") s"
    done
    if [ "$mode" = loaded ]; then kill "$BUSY"; fi
done
