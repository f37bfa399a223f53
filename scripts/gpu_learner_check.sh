#!/usr/bin/env bash
# GPU learner check (issue 4, point 6), one prepared run for the GPU machine, well under 10 minutes:
# one Memo training iteration with num_gpus_per_learner=1 against the same on CPU, for two model
# widths; prints a table and writes bench_out/gpu_learner_check/gpu_learner_check.{md,json}.
#   scripts/gpu_learner_check.sh            (PYTHON=... to use another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PYTHON" -c "import torch, ray; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'ray', ray.__version__)"
exec timeout 540 "$PYTHON" scripts/gpu_learner_check.py "$@"
