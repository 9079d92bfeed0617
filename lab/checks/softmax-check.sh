#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (sm_90), from the repository root:
#   bash lab/checks/softmax-check.sh
# The check of SoftmaxProjection's padded logits and of BF16 products in
# cuBLAS: builds only the plexus library, the cuda::gemm, SoftmaxProjection,
# FullyConnected and convolution tests, the bf16 training test,
# plexus-bench and softmax-gemm-bench; runs those tests (the padded
# vocabularies at strict f32, TF32 and BF16 against the f64 CPU kernels; the
# convolutions at BF16, every pass now visibly rounded to bf16), memcheck over
# the SoftmaxProjection CUDA tests, softmax-gemm-bench (whether the weight
# needs a padded copy), then the SoftmaxProjection rows of lab/bench/run.sh
# against PyTorch at f32, tf32 and bf16 side by side. Logs go to $OUT
# (default softmax-check-logs/); BUILD names the build folder (default build-gpu);
# TESTS replaces the list of test targets (e.g. TESTS="cuda_gemm_test
# softmax_projection_test" for a quicker loop).
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/checks/build-targets.sh
logs=${OUT:-softmax-check-logs}
mkdir -p "$logs"
build=${BUILD:-build-gpu}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$logs/gpu.txt"
echo "== build"
start=$(date +%s)
tests=${TESTS:-cuda_gemm_test softmax_projection_test fully_connected_test conv2d_test conv_transpose2d_test \
plexus_ae_bf16_train_test}
# shellcheck disable=SC2086  # $tests is a list of target names
build_targets "$logs" "$build" $tests plexus-bench softmax-gemm-bench
echo "built in $(( $(date +%s) - start )) s"

echo "== tests"
tests_ok=1
for t in $tests; do
  timeout 300 "$build/tests/$t" --gtest_brief=1 > "$logs/$t.log" 2>&1 || tests_ok=0
  echo "-- $t"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|at bf16 against tf32|^  (tf32|bf16):|^vocab" \
    "$logs/$t.log" | head -60
done

echo "== memcheck over the cuda::gemm and SoftmaxProjection CUDA tests"
memcheck_rc=0
for t in cuda_gemm_test softmax_projection_test; do
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 "$build/tests/$t" --gtest_filter='*Cuda*' \
    > "$logs/memcheck-$t.log" 2>&1 || memcheck_rc=$?
  echo "$t: $(grep -E "ERROR SUMMARY" "$logs/memcheck-$t.log" | tail -1)"
done

echo "== softmax-gemm-bench (padded weight or not)"
timeout 120 "$build/bin/softmax-gemm-bench" | tee "$logs/gemm-variants.jsonl"

echo "== SoftmaxProjection against PyTorch (f32, tf32, bf16)"
OUT="$logs" BUILD="$build" timeout 300 bash lab/bench/run.sh --precision f32,tf32,bf16 --only Softmax --no-compile \
  > "$logs/bench.log" 2>&1
bench_rc=$?
cat "$logs/precisions.md" 2>/dev/null || tail -30 "$logs/bench.log"
echo "SUMMARY: tests $([ $tests_ok = 1 ] && echo passed || echo FAILED); memcheck rc=$memcheck_rc; bench rc=$bench_rc"
