#!/usr/bin/env bash
# Where a model's CUDA-graph training step spends its time, kernels side by
# side included, on a machine with an NVIDIA GPU, from the repository root:
#   bash lab/checks/step-timeline.sh [MODEL ...]   # default bmshj2018-factorized bmshj2018-hyperprior
# Builds plexus-bench, records every kernel of 5 replays of each model's bf16
# step with CUPTI (plexus-bench --timeline: stream, start, end; the kernels
# run as in the step, unlike under ncu, which runs each alone) into
# $OUT/MODEL-timeline.jsonl, and prints lab/bench/timeline_table.py's table:
# per kind of kernel, the time it ran alone (the most the step could gain
# from it) and beside other kernels, and the split of the step's span.
# Logs go to $OUT (default step-timeline-logs/); BUILD names the build folder.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source lab/checks/build-targets.sh
logs=${OUT:-step-timeline-logs}
build=${BUILD:-build-gpu}
mkdir -p "$logs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
build_targets "$logs" "$build" plexus-bench
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(bmshj2018-factorized bmshj2018-hyperprior)
status=0
for model in "${models[@]}"; do
  echo "== $model"
  if ! "$build/bin/plexus-bench" --precision bf16 --models --only "$model" --timeline "$logs/$model-timeline.jsonl" \
       > "$logs/$model-steps.jsonl" 2> "$logs/$model.err"; then
    status=1
    tail -5 "$logs/$model.err"
    continue
  fi
  python3 lab/bench/timeline_table.py "$logs/$model-timeline.jsonl" | tee "$logs/$model.txt" || status=1
done
[ $status -eq 0 ] && echo "SUMMARY: step-timeline done" || echo "SUMMARY: step-timeline FAILED"
exit $status
