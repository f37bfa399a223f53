#!/usr/bin/env bash
# GPU checks, one prepared run for a GPU machine, under 10 minutes:
# 1. MEM1 (scripts/gpu_mem1_check.py, first): the vllm generation backend (generation, behaviour
#    log-probs vs the hf backend, IPC weight sync, LoRA sync) and the learner's peak GPU memory,
#    default path vs full-vocabulary logits; writes gpu_mem1_check.{md,json}. Its result does not
#    stop step 2.
# 2. One Memo training iteration with num_gpus_per_learner=1 against the same on CPU, for two
#    model widths; prints a table and writes gpu_learner_check.{md,json}.
# Both under bench_out/gpu_learner_check/.
#   scripts/gpu_learner_check.sh            (PYTHON=... to use another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PYTHON" -c "import torch, ray; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'ray', ray.__version__)"
mem1=0
timeout 300 "$PYTHON" scripts/gpu_mem1_check.py || mem1=$?
timeout 280 "$PYTHON" scripts/gpu_learner_check.py "$@"
exit "$mem1"
