#!/usr/bin/env bash
# The training step of every bundled model against PyTorch. On a machine
# with an NVIDIA GPU and PyTorch (CompressAI too, for its rows), from the
# repository root:
#   lab/checks/bench-models-check.sh [ROUNDS]    # default 3
# Builds plexus-bench, runs lab/bench/run.sh --precision bf16 --models
# --rounds ROUNDS (Plexus and PyTorch alternating which goes first), then
# plexus-bench --profile for the per-node times of each model's step.
# Logs and the table go to $OUT (default bench-models-logs/); BUILD names the
# build folder (default build-gpu).
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/checks/build-targets.sh
logs=${OUT:-bench-models-logs}
build=${BUILD:-build-gpu}
rounds=${1:-3}
mkdir -p "$logs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$logs/gpu.txt"
python3 -c "import compressai; print('compressai', compressai.__version__)" 2>&1 | tail -1 | tee -a "$logs/gpu.txt"
echo "== configure + build"
build_targets "$logs" "$build" plexus-bench
echo "== training steps, $rounds rounds"
OUT=$logs/steps BUILD=$build bash lab/bench/run.sh --precision bf16 --models --rounds "$rounds" 2> "$logs/steps.err"
status=$?
echo "== per-node profile"
"$build/bin/plexus-bench" --cases lab/bench/bench_cases.json --precision bf16 --models --profile \
  > "$logs/profile.jsonl" 2> "$logs/profile.err" || status=1
[ $status -eq 0 ] && echo "SUMMARY: bench-models-check done" || echo "SUMMARY: bench-models-check FAILED"
exit $status
