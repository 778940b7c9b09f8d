#!/usr/bin/env bash
# The prepared GPU check, for a CUDA machine (a GPU workstation, or a Colab GPU runtime after
# `bash scripts/setup.sh`): the benchmark at the ci, cpu and gpu sizes, with the batched sweep's
# speed-up at K = 8, 32 and 128, then every chapter executed once at the gpu scale. It writes
# book/_data/bench-gpu.json and book/_data/costs-gpu.json, which the costs page shows.
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'measure_gpu: no CUDA device here')"
python -m normlab.bench --out book/_data/bench-gpu.json
NORMLAB_SCALE=gpu python scripts/measure_costs.py --scale gpu
