#!/usr/bin/env bash
# The GPU day, on the GPU machine, from a copy of the repository with the kit in .gpu_kit/:
# installs the kit's wheels into a folder of their own (the image's torch and the rest stay as
# they are), puts this tree's memrl first on the path and runs every GPU check
# (scripts/gpu_check.py). Leaves OUTPUT_DIR/summary.md and OUTPUT_DIR/gpu_check.tgz (every table,
# parquet file, plot and log). Exit code: gpu_check.py's (0: no check failed); 2 or 3 when the
# kit is missing or does not install.
#   bash scripts/gpu_day.sh OUTPUT_DIR [gpu_check.py options, e.g. --only memo-memory]
# PYTHON (default python3, the image's) and GPU_KIT_DIR (default .gpu_kit) can be changed.
set -uo pipefail
out=${1:?usage: scripts/gpu_day.sh OUTPUT_DIR [gpu_check.py options]}
shift
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
kit=${GPU_KIT_DIR:-.gpu_kit}
shopt -s nullglob
wheels=("$kit"/*.whl)
if [ ${#wheels[@]} -eq 0 ]; then
  echo "error: no wheels in $kit/: build them with scripts/gpu_kit.sh and carry .gpu_kit" >&2
  exit 2
fi
site=$(mktemp -d /tmp/memrl-gpu-kit.XXXXXX)
work=$(mktemp -d /tmp/memrl-gpu-check.XXXXXX)
trap 'rm -rf "$site" "$work"' EXIT
start=$SECONDS
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target "$site" "${wheels[@]}" || exit 3
echo "kit installed in $((SECONDS - start)) s: ${#wheels[@]} wheels into $site"
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$PYTHON" scripts/gpu_check.py --output "$work/results" "$@"
rc=$?
cp "$work/results/summary.md" "$out/"
tar -czf "$out/gpu_check.tgz" -C "$work" results
echo "wrote $out/summary.md and $out/gpu_check.tgz; $((SECONDS - start)) s in all"
exit $rc
