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
source lab/checks/step-ab.sh
logs=${OUT:-conv-branch-logs}
build=${BUILD:-build-gpu}
rounds=${1:-3}
mkdir -p "$logs"
tests=(cuda_branch_test net_branch_test conv2d_test conv_transpose2d_test step_graph_test convolution_shared_scratch_test)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
build_targets "$logs" "$build" plexus-bench "${tests[@]}"
status=0
# The CUDA cases (the CPU-only ones do not reach the branch).
for t in "${tests[@]}"; do run_gtest "$logs" "$build" "$t" "*Cuda*:*TensorCore*:*FewChannel*" || status=1; done
grep -h "SKIPPED" "$logs"/*_test.log | head -5
step_ab "$logs" "$build" "$rounds" PLEXUS_CONV_BRANCH "branch off" "branch on" || status=1
[ $status -eq 0 ] && echo "SUMMARY: conv-branch-check passed" || echo "SUMMARY: conv-branch-check FAILED"
exit $status
