#!/usr/bin/env bash
# Builds the GPU-day kit on a CPU machine with network: downloads the wheels the GPU image lacks
# for the GPU checks (scripts/gpu_kit_wheels.txt), leaves ray/jars out of Ray's, writes them to
# .gpu_kit/ and fails when the kit plus the working tree would exceed the 64 MiB a device call
# carries. docs/gpu.md says how to run the checks with it.
#   scripts/gpu_kit.sh [--update-manifest]        (PYTHON=... to use another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
exec "$PYTHON" scripts/gpu_kit.py build "$@"
