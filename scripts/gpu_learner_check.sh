#!/usr/bin/env bash
# GPU learner check alone (scripts/gpu_day.sh runs it with every other GPU check): one Memo
# training iteration with num_gpus_per_learner=1 against the same on CPU, for two model widths;
# prints a table and writes bench_out/gpu_learner_check/memo_ppo_learner.{md,parquet,png}.
#   scripts/gpu_learner_check.sh [gpu_learner_check.py options]
# PYTHON: the interpreter (default: .venv/bin/python where there is one, else python3, as on the
# GPU machine, where the kit's packages must be on PYTHONPATH: see docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PYTHON" -c "import torch, ray; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'ray', ray.__version__)"
exec timeout 540 "$PYTHON" scripts/gpu_learner_check.py "$@"
