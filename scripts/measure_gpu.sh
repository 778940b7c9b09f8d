#!/usr/bin/env bash
# The prepared GPU check, for a CUDA machine (a GPU workstation, or a Colab GPU runtime after
# `bash scripts/setup.sh`), as one script: the device tests, the benchmark at the ci, cpu and gpu
# sizes with the batched sweep's speed-up at K = 8, 32 and 128, then every chapter executed once at
# the gpu scale. It writes book/_data/bench-gpu.json and book/_data/costs-gpu.json, which the costs
# page shows, and copies them to $OUT when that is set (the device tool's output folder).
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'measure_gpu: no CUDA device here')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
# Sweeps train in this process on a GPU (run_many batches runs of one architecture); a store would
# turn the chapters' timings into cache hits, so none is used here.
unset NORMLAB_STORE
start=$(date +%s)
# The device paths first (a few seconds): every variant forward and backward, batched training,
# the sweeps' batched path, probes.
python -m pytest -q -p no:cacheprovider code/tests/test_device.py code/tests/test_batched.py \
    code/tests/test_probes.py -x
echo "measure_gpu: device tests $(( $(date +%s) - start )) s"
python -m normlab.bench --out book/_data/bench-gpu.json
echo "measure_gpu: benchmark done at $(( $(date +%s) - start )) s"
python scripts/measure_costs.py --scale gpu
echo "measure_gpu: chapters done at $(( $(date +%s) - start )) s"
if [ -n "${OUT:-}" ]; then
    cp book/_data/bench-gpu.json book/_data/costs-gpu.json "$OUT"/
fi
