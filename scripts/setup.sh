#!/usr/bin/env bash
# Set-up: install the book's dependencies into the current Python environment.
# A torch that is already installed is left alone (Colab, a CUDA machine, your own build).
# Without one, TORCH_SPEC is installed: by default torch==2.13.0, which this project's machines
# hold as a CPU wheel; elsewhere pick the build for your hardware at https://pytorch.org first.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
if python -c "import torch" 2>/dev/null; then
    echo "setup: keeping torch $(python -c 'import torch; print(torch.__version__)')"
else
    python -m pip install "${TORCH_SPEC:-torch==2.13.0}"
fi
python -m pip install -r requirements.txt
