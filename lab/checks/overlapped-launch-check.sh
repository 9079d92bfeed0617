#!/usr/bin/env bash
# On a machine with an NVIDIA GPU of compute capability 9.0 or later, from the repository root:
#   bash lab/checks/overlapped-launch-check.sh [ROUNDS]   (default 3)
# Kernels launched overlapped with their predecessor (programmatic dependent
# launch, plexus/cuda/overlapped_launch.h) against ordinary launches
# (PLEXUS_OVERLAPPED_LAUNCH=0): builds the tests of every layer whose kernels
# launch overlapped, the Net's parity and step-graph tests, and plexus-bench;
# runs those tests with overlapped launches (their CUDA cases: f64 gradient
# checks, CPU/CUDA parity, eager against graph replay), compute-sanitizer
# memcheck and racecheck over the convolution and GDN bf16 cases, then times
# every bundled model's bf16 training step both ways, alternating
# (lab/checks/step-ab.sh). Logs go to $OUT (default overlapped-launch-logs/);
# BUILD names the build folder; MODELS narrows the timed models.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source lab/checks/build-targets.sh
source lab/checks/step-ab.sh
logs=${OUT:-overlapped-launch-logs}
build=${BUILD:-build-gpu}
rounds=${1:-3}
mkdir -p "$logs"
tests=(conv2d_test conv_transpose2d_test conv_bf16_storage_test convolution_scratch_test gdn_test
       gdn_bf16_storage_test relu_test abs_test elementwise_bf16_storage_test net_parity_test
       net_bf16_storage_test step_graph_test)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
start=$(date +%s)
build_targets "$logs" "$build" "${tests[@]}" plexus-bench
echo "built in $(( $(date +%s) - start )) s"
status=0
echo "== tests, overlapped launches"
for t in "${tests[@]}"; do
  run_gtest "$logs" "$build" "$t" || status=1
done
echo "== compute-sanitizer over the bf16 convolution and GDN cases"
for tool in memcheck racecheck; do
  for t in conv2d_test gdn_bf16_storage_test; do
    filter='*'
    [ "$t" = conv2d_test ] && filter='*TensorCoreBf16*'
    timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 99 "$build/tests/$t" --gtest_filter="$filter" \
      > "$logs/$tool-$t.log" 2>&1 || status=1
    echo "$tool $t: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$logs/$tool-$t.log" | tail -1)"
  done
done
echo "== bf16 training steps, ordinary (0) and overlapped (1) launches"
step_ab "$logs" "$build" "$rounds" PLEXUS_OVERLAPPED_LAUNCH ordinary overlapped || status=1
echo "SUMMARY: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
