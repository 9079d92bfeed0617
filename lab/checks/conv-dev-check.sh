#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (sm_90), from the repository root:
#   bash lab/checks/conv-dev-check.sh [--precision LIST]   (LIST: comma-separated f32, tf32, bf16)
# The quick loop for convolution kernels: builds only the plexus library, the
# Conv2d / ConvTranspose2d tests, the bf16 training test and plexus-bench;
# runs the convolution tests (every pass of the tensor-core engine, TF32 and
# BF16, against the f64 CPU reference, gradient checks, parity), the bf16
# training test (bmshj2018-factorized in bf16 against f32),
# compute-sanitizer memcheck over the tensor-core tests, then the convolution
# rows of lab/bench/run.sh with PyTorch at each precision of LIST (default
# tf32,bf16), side by side. Logs go to $OUT (default conv-check-logs/).
# MEMCHECK_FILTER narrows the memcheck (default '*TensorCore*'; the BF16
# tests, '*TensorCoreBf16*', run both products).
# On a Hopper (compute capability 9.0) the tap-major passes run the wgmma
# kernels; the tensor-core tests run a second time with PLEXUS_CONV_WGMMA=0
# to cover the mma.sync kernels too, and COMPARE_MMA_SYNC=1 also times
# plexus-bench's convolution rows with them (into $OUT/mma-sync-*.jsonl).
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/checks/build-targets.sh
logs=${OUT:-conv-check-logs}
mkdir -p "$logs"
build=${BUILD:-build-gpu}
precision=tf32,bf16
[ "${1:-}" = "--precision" ] && precision=$2

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$logs/gpu.txt"
echo "== build (plexus, conv tests, bf16 training test, plexus-bench)"
start=$(date +%s)
build_targets "$logs" "$build" conv2d_test conv_transpose2d_test plexus_ae_bf16_train_test plexus-bench
echo "built in $(( $(date +%s) - start )) s"

echo "== convolution tests"
tests_ok=1
for t in conv2d_test conv_transpose2d_test plexus_ae_bf16_train_test; do
  timeout 300 "$build/tests/$t" --gtest_brief=1 > "$logs/$t.log" 2>&1 || tests_ok=0
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error|Expected|Which is|forward,|gradient,|^(f32|tf32|bf16):|passes run" \
    "$logs/$t.log" | head -40
done
echo "== tensor-core tests with the mma.sync kernels (PLEXUS_CONV_WGMMA=0)"
for t in conv2d_test conv_transpose2d_test; do
  PLEXUS_CONV_WGMMA=0 timeout 300 "$build/tests/$t" --gtest_brief=1 --gtest_filter='*TensorCore*' \
    > "$logs/$t-mma-sync.log" 2>&1 || tests_ok=0
  grep -E "^\[  (PASSED|FAILED) |Failure|Expected|Which is|passes run" "$logs/$t-mma-sync.log" | head -20
done

echo "== memcheck over the tensor-core tests"
memcheck_ok=1
for t in conv2d_test conv_transpose2d_test; do
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 "$build/tests/$t" \
    --gtest_filter="${MEMCHECK_FILTER:-*TensorCore*}" > "$logs/memcheck-$t.log" 2>&1 || memcheck_ok=0
  grep -E "ERROR SUMMARY" "$logs/memcheck-$t.log" | tail -1
done

echo "== convolution benchmark ($precision, with PyTorch)"
OUT="$logs" BUILD="$build" timeout 400 bash lab/bench/run.sh --precision "$precision" --only Conv --no-compile \
  > "$logs/bench.log" 2>&1
bench_rc=$?
cat "$logs/precisions.md" 2>/dev/null || cat "$logs/table.md" 2>/dev/null || tail -30 "$logs/bench.log"
if [ "${COMPARE_MMA_SYNC:-0}" = 1 ]; then
  echo "== plexus-bench convolution rows with the mma.sync kernels (PLEXUS_CONV_WGMMA=0)"
  for p in ${precision//,/ }; do
    PLEXUS_CONV_WGMMA=0 timeout 200 "$build/bin/plexus-bench" --cases lab/bench/bench_cases.json --precision "$p" \
      --only Conv > "$logs/mma-sync-$p.jsonl" 2>&1
    # Per row: mma.sync ms, default-kernel ms (the run above) and the speed-up, forward and backward.
    python3 - "$logs/mma-sync-$p.jsonl" "$logs/$p/plexus.jsonl" "$p" <<'PY'
import json, sys
def rows(path):
    out = {}
    for line in open(path):
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("kind") == "layer":
                out[r["name"]] = r
    return out
old, new = rows(sys.argv[1]), rows(sys.argv[2])
print(f"| {sys.argv[3]} row | mma.sync fwd ms | default fwd ms | fwd x | mma.sync bwd ms | default bwd ms | bwd x |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, o in old.items():
    if name in new:
        n = new[name]
        print(f"| {name} | {o['forward_ms']:.3f} | {n['forward_ms']:.3f} | {o['forward_ms'] / n['forward_ms']:.2f}x "
              f"| {o['backward_ms']:.3f} | {n['backward_ms']:.3f} | {o['backward_ms'] / n['backward_ms']:.2f}x |")
PY
  done
fi
echo "SUMMARY: tests $([ $tests_ok = 1 ] && echo passed || echo FAILED); memcheck $([ $memcheck_ok = 1 ] && echo clean || echo FAILED); bench rc=$bench_rc"

# Optional: PROFILE=1 adds Nsight Compute metrics of the engine's kernels on
# the 128-channel 5x5/2 layer at 128x128 (forward and backward).
if [ "${PROFILE:-0}" = 1 ] && command -v ncu > /dev/null; then
  echo "== ncu"
  timeout 240 ncu --kernel-name regex:'gather|weight_grad' --launch-count 3 \
    --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
    "$build/bin/plexus-bench" --precision "${precision##*,}" --only "Conv2d 5x5/2 128->128 @128" --warmup 0 --repeats 1 \
    > "$logs/ncu.txt" 2>&1
  grep -E "gather_gemm|weight_grad|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Stall|Warp Cycles Per Issued|Achieved Occupancy|Executed Ipc" "$logs/ncu.txt" | head -80
fi
