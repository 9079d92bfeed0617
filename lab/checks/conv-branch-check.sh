#!/usr/bin/env bash
# The convolutions' parameter gradients on a stream branch (cuda::Branch),
# on a machine with an NVIDIA GPU, from the repository root:
#   bash lab/checks/conv-branch-check.sh [ROUNDS]     # default 3
# Builds plexus-bench and the tests that cover the branch (cuda_branch_test, net_branch_test,
# the convolution layers' CUDA tests, the step-graph tests), runs them, then
# times every bundled model's bf16 training step (CUDA graph) with the
# branch off (PLEXUS_CONV_BRANCH=0) and on, ROUNDS times, alternating which
# goes first, and prints the median images/s of each and their ratio.
# MODELS (a plexus-bench --only text, default: all models) narrows the run.
# Logs go to $OUT (default conv-branch-logs/); BUILD names the build folder.
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/checks/build-targets.sh
logs=${OUT:-conv-branch-logs}
build=${BUILD:-build-gpu}
rounds=${1:-3}
mkdir -p "$logs"
tests=(cuda_branch_test net_branch_test conv2d_test conv_transpose2d_test step_graph_test convolution_shared_scratch_test)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
build_targets "$logs" "$build" plexus-bench "${tests[@]}"
status=0
for t in "${tests[@]}"; do
  # The CUDA cases (the CPU-only ones do not reach the branch).
  if "$build/tests/$t" --gtest_brief=1 --gtest_filter="*Cuda*:*TensorCore*:*FewChannel*" > "$logs/$t.log" 2>&1; then
    echo "$t: $(grep -E '^\[  PASSED' "$logs/$t.log")"
  else
    status=1
    echo "$t: FAILED"
    grep -E "FAILED|Failure|error" "$logs/$t.log" | head -20
  fi
done
grep -h "SKIPPED" "$logs"/*_test.log | head -5
only=()
[ -n "${MODELS:-}" ] && only=(--only "$MODELS")
for round in $(seq 1 "$rounds"); do
  order=(0 1)
  [ $((round % 2)) -eq 0 ] && order=(1 0)
  for branch in "${order[@]}"; do
    PLEXUS_CONV_BRANCH=$branch "$build/bin/plexus-bench" --precision bf16 --models "${only[@]}" \
      > "$logs/steps-branch$branch-round$round.jsonl" 2>> "$logs/steps.err" || status=1
  done
done
python3 - "$logs" "$rounds" << 'EOF'
import json, statistics, sys
logs, rounds = sys.argv[1], int(sys.argv[2])
rates = {}
for branch in (0, 1):
    for r in range(1, rounds + 1):
        for line in open(f"{logs}/steps-branch{branch}-round{r}.jsonl"):
            row = json.loads(line)
            if row.get("kind") == "train_step_graph":
                rates.setdefault(row["name"], {}).setdefault(branch, []).append(row["images_per_s"])
print(f"{'model':24} {'branch off img/s':>17} {'branch on img/s':>16} {'on/off':>7}   (medians of {rounds} rounds)")
for name, by in rates.items():
    off, on = statistics.median(by.get(0, [0])), statistics.median(by.get(1, [0]))
    print(f"{name:24} {off:17,.0f} {on:16,.0f} {on / off if off else 0:7.3f}")
EOF
[ $status -eq 0 ] && echo "SUMMARY: conv-branch-check passed" || echo "SUMMARY: conv-branch-check FAILED"
exit $status
