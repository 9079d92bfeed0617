#!/usr/bin/env bash
# On a machine with an NVIDIA Hopper GPU, from the repository root:
#   bash lab/checks/cluster-splits-check.sh [ROUNDS]   (default 3)
# The wgmma gather's K splits summed inside a thread-block cluster, against
# the partial-sum buffer and reduce_splits_kernel (PLEXUS_CONV_CLUSTER_SPLITS=0):
# builds the convolution tests and plexus-bench, runs the tensor-core tests
# both ways, compute-sanitizer memcheck over the BF16 tensor-core tests, then
# times every bundled model's bf16 training step both ways, alternating
# (lab/checks/step-ab.sh). Logs go to $OUT (default cluster-splits-logs/);
# BUILD names the build folder.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source lab/checks/build-targets.sh
source lab/checks/step-ab.sh
logs=${OUT:-cluster-splits-logs}
build=${BUILD:-build-gpu}
rounds=${1:-3}
mkdir -p "$logs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
start=$(date +%s)
build_targets "$logs" "$build" conv2d_test conv_transpose2d_test plexus-bench
echo "built in $(( $(date +%s) - start )) s"
status=0
for setting in 1 0; do
  echo "== tensor-core tests, PLEXUS_CONV_CLUSTER_SPLITS=$setting"
  for t in conv2d_test conv_transpose2d_test; do
    PLEXUS_CONV_CLUSTER_SPLITS=$setting run_gtest "$logs" "$build" "$t" '*TensorCore*' || status=1
    mv "$logs/$t.log" "$logs/$t-clusters$setting.log"
  done
done
echo "== memcheck over the BF16 tensor-core tests"
for t in conv2d_test conv_transpose2d_test; do
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 "$build/tests/$t" \
    --gtest_filter='*TensorCoreBf16*' > "$logs/memcheck-$t.log" 2>&1 || status=1
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$logs/memcheck-$t.log" | tail -2
done
echo "== bf16 training steps, clusters off (0) and on (1)"
step_ab "$logs" "$build" "$rounds" PLEXUS_CONV_CLUSTER_SPLITS "partial sums" clusters || status=1
echo "SUMMARY: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
