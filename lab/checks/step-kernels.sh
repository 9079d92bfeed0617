#!/usr/bin/env bash
# Every kernel of a model's training step, on a machine with an NVIDIA GPU
# and Nsight Compute, from the repository root:
#   bash lab/checks/step-kernels.sh [MODEL ...]   # default bmshj2018-factorized bmshj2018-hyperprior
# Builds plexus-bench, then per model runs its bf16 step under `ncu` (each
# kernel timed alone, clocks not locked: gpu__time_duration) and writes
# $OUT/MODEL.csv, then the table of one step by kind of kernel
# (lab/bench/step_kernels.py). The first kernels of the run are the eager
# steps' (plexus-bench times them before the CUDA graph), so one step is the
# kernels between the first two Adam updates.
# CACHE=none keeps the caches as the previous kernel left them (as in the
# step itself) instead of flushing them before each kernel.
# Logs go to $OUT (default step-kernels-logs/); BUILD names the build folder.
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/checks/build-targets.sh
logs=${OUT:-step-kernels-logs}
build=${BUILD:-build-gpu}
mkdir -p "$logs"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
build_targets "$logs" "$build" plexus-bench
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(bmshj2018-factorized bmshj2018-hyperprior)
status=0
for model in "${models[@]}"; do
  echo "== $model"
  timeout 300 "$ncu" --clock-control none --cache-control "${CACHE:-all}" --metrics gpu__time_duration.sum -c 1500 --csv \
    "$build/bin/plexus-bench" --precision bf16 --models --only "$model" --warmup 0 --repeats 1 \
    > "$logs/$model.csv" 2> "$logs/$model.err" || { status=1; tail -5 "$logs/$model.err"; continue; }
  python3 lab/bench/step_kernels.py "$logs/$model.csv" | tee "$logs/$model.txt"
done
[ $status -eq 0 ] && echo "SUMMARY: step-kernels done" || echo "SUMMARY: step-kernels FAILED"
exit $status
