#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (sm_90) and Nsight Compute, from the
# repository root:
#   bash lab/checks/few-channel-dev-check.sh
# The quick loop for the convolution kernels next to RGB images
# (layers/convolution/few_channel_conv.h): builds the plexus library, the Conv2d /
# ConvTranspose2d tests and plexus-bench; runs the convolution tests (every
# pass at TF32 and BF16 against the f64 CPU reference, including the
# ConvTranspose2d forwards onto 1-4 channels and Conv2d input gradients onto
# them), compute-sanitizer memcheck over the TF32 tensor-core tests, the
# benchmark rows that run few_channel_conv::backward_data next to PyTorch
# (ConvT 5x5/2 128->3 forward; Conv2d 3->128 backward, i.e. its input
# gradient) at TF32 and BF16, and the per-kernel times of the ConvT 128->3
# row under Nsight Compute (lab/bench/conv-kernel-times.sh). Takes about
# 2 minutes on a 16-core machine with an H100, half of it the build.
# QUICK=1: only the ConvTranspose2d tests and plexus-bench's ConvT 128->3 row
# at TF32 and BF16 (no PyTorch), about 1 minute: for comparing variants of
# the kernel.
# Logs go to a folder (default few-channel-logs/); $OUT (when set) receives
# summary.txt and logs.tar.gz of that folder.
set -uo pipefail
cd "$(dirname "$0")/../.."
logs=${LOGS:-few-channel-logs}
mkdir -p "$logs"
build=${BUILD:-build-gpu}
summary="$logs/summary.txt"
: > "$summary"
start=$(date +%s)
# Copies what there is so far to $OUT, so a run cut short still returns it.
publish() {
  [ -n "${OUT:-}" ] || return 0
  cp "$summary" "$OUT/summary.txt"
  tar -czf "$OUT/logs.tar.gz" -C "$logs" . 2> /dev/null
}
note() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $(( $(date +%s) - start )); }
# bench_rows NAME ROWS: plexus-bench's rows matching ROWS at TF32 and BF16 against
# PyTorch eager (lab/bench/run.sh), logs and table under $logs/NAME.
bench_rows() {
  OUT="$logs/$1" BUILD="$build" timeout 150 bash lab/bench/run.sh --precision tf32,bf16 --only "$2" \
    --no-compile > "$logs/$1.log" 2>&1
  note "bench rc=$?"
  cat "$logs/$1/precisions.md" 2>/dev/null | tee -a "$summary" || tail -20 "$logs/$1.log" | tee -a "$summary"
}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$summary"
if [ "${QUICK:-0}" = 1 ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$logs/build.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" --target conv_transpose2d_test plexus-bench >> "$logs/build.log" 2>&1 ||
    { tail -40 "$logs/build.log"; exit 1; }
  note "built at $(elapsed) s"
  timeout 100 "$build/tests/conv_transpose2d_test" --gtest_brief=1 > "$logs/conv_transpose2d_test.log" 2>&1
  note "conv_transpose2d_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$logs/conv_transpose2d_test.log" | tr '\n' ' ')"
  for p in tf32 bf16; do
    "$build/bin/plexus-bench" --cases lab/bench/bench_cases.json --precision "$p" --only "ConvT 5x5/2 128->3" \
      2>&1 | grep '^{' | tee -a "$summary"
  done
  publish
  exit 0
fi
note "== build (plexus, conv tests, plexus-bench)"
if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
       cmake --build "$build" -j "$(nproc)" --target conv2d_test conv_transpose2d_test plexus-bench; } \
     > "$logs/build.log" 2>&1; then
  tail -60 "$logs/build.log" | tee -a "$summary"
  note "SUMMARY: build FAILED"
  publish
  exit 1
fi
note "built at $(elapsed) s"

note "== convolution tests"
tests_ok=1
for t in conv_transpose2d_test conv2d_test; do
  timeout 200 "$build/tests/$t" --gtest_brief=1 > "$logs/$t.log" 2>&1 || tests_ok=0
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error|Expected|Which is|forward,|gradient,|passes run" \
    "$logs/$t.log" | head -40 | tee -a "$summary"
  # The bf16 / tf32 errors of the cases onto few channels (the first ones of each list).
  grep -A2 -E '"out_channels":[1-4],|on \[[0-9]+, [1-4], ' "$logs/$t.log" | head -40 >> "$summary"
done
note "tests done at $(elapsed) s"
publish

note "== benchmark: ConvT 128->3 (forward: few_channel_conv::backward_data), TF32 and BF16, with PyTorch eager"
bench_rows bench-convt "128->3"
publish

note "== per-kernel times (Nsight Compute): ConvT 5x5/2 128->3 @128"
if command -v ncu > /dev/null; then
  for p in tf32 bf16; do
    note "-- $p"
    OUT="$logs/ncu" BUILD="$build" timeout 90 bash lab/bench/conv-kernel-times.sh "$p" "ConvT 5x5/2 128->3 @128" \
      > "$logs/kernel-times-$p.txt" 2>&1
    grep -E "few_channel|gather|col2im|gemm|bias" "$logs/kernel-times-$p.txt" | cut -c1-160 >> "$summary"
  done
  # Where the few-channel kernel's cycles go (stalls, occupancy), TF32.
  timeout 90 ncu --kernel-name backward_data_kernel --launch-count 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
    "$build/bin/plexus-bench" --precision tf32 --only "ConvT 5x5/2 128->3 @128" --warmup 0 --repeats 1 \
    > "$logs/ncu-few-channel.txt" 2>&1
  grep -E "Duration|Throughput|Stall|Warp Cycles Per Issued|Achieved Occupancy|Theoretical Occupancy|Registers|Issued Ipc|Eligible" \
    "$logs/ncu-few-channel.txt" | head -40 >> "$summary"
else
  note "ncu not found"
fi
note "at $(elapsed) s"
publish

note "== memcheck over the TF32 tensor-core tests"
for t in conv_transpose2d_test conv2d_test; do
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 99 "$build/tests/$t" \
    --gtest_filter='*TensorCoreCudaMatches*:*FewChannel*' > "$logs/memcheck-$t.log" 2>&1
  note "$t memcheck rc=$? $(grep -E "ERROR SUMMARY" "$logs/memcheck-$t.log" | tail -1)"
done
publish

note "== benchmark: Conv2d 3->128 (backward: its input gradient), TF32 and BF16, with PyTorch eager"
bench_rows bench-conv " 3->128"
note "SUMMARY: tests $([ $tests_ok = 1 ] && echo passed || echo FAILED) at $(elapsed) s"
publish
