#!/usr/bin/env bash
# The PyTorch peer for bench/cpu.sh: a venv at bench/.venv-torch with the PyPI torch wheel
# (it runs on the CPU as it is; about 5 GB with its CUDA libraries), h5py and numpy.
#   bash bench/setup_torch.sh         # TORCH_VERSION=2.15.0 by default
set -euo pipefail
cd "$(dirname "$0")"
V=${TORCH_VERSION:-2.15.0}
if [ -x .venv-torch/bin/python ] && .venv-torch/bin/python -c "import torch, h5py, numpy; assert torch.__version__.startswith('$V')" 2>/dev/null; then
  echo "bench/.venv-torch: torch $V already there"; exit 0
fi
python3 -m venv .venv-torch
.venv-torch/bin/pip install --quiet --upgrade pip
.venv-torch/bin/pip install --quiet "torch==$V" h5py numpy
.venv-torch/bin/python -c "import torch; print('bench/.venv-torch: torch', torch.__version__)"
