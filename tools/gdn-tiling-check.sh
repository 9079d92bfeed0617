#!/usr/bin/env bash
# GDN warp-tiling A/B on a machine with an NVIDIA GPU, from the repository root:
#   bash tools/gdn-tiling-check.sh
# Builds libplexus, gdn_test, plexus-bench and gdn-tiling-bench (sm_90 unless
# CUDA_ARCHITECTURES says otherwise); runs the GDN tests with CUDA; times the
# TF32 kernels under each tiling of tools/bench/gdn_tiling_bench.cu at
# 16x128x128x128; the GDN benchmark rows at TF32 against PyTorch eager at
# TF32; the TF32 accuracy test under compute-sanitizer memcheck; and GDN 128
# @128 against PyTorch under torch.compile at TF32 (tools/gdn-check.sh also
# times strict f32).
# Logs go to $OUT (or gdn-check-logs/).
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${OUT:-gdn-check-logs}
mkdir -p "$logs"
build=${BUILD:-build-gpu}
python=${PYTHON:-python3}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$logs/gpu.txt"
echo "== configure + build"
start=$SECONDS
if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-90}" &&
       cmake --build "$build" --target plexus gdn_test plexus-bench gdn-tiling-bench -j "$(nproc)"; } > "$logs/build.log" 2>&1; then
  tail -60 "$logs/build.log"
  echo "SUMMARY: build FAILED"
  exit 1
fi
echo "built in $((SECONDS - start)) s"

echo "== gdn_test"
"$build/tests/gdn_test" > "$logs/gdn_test.log" 2>&1
test_rc=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|TF32     |Failure|error" "$logs/gdn_test.log" | head -40
skipped=$(grep -c "^\[  SKIPPED \]" "$logs/gdn_test.log")
echo "gdn_test rc=$test_rc skipped=$skipped"

echo "== tilings (16x128x128x128, TF32 kernels alone)"
"$build/bin/gdn-tiling-bench" | tee "$logs/tilings.jsonl"

echo "== GDN benchmarks, TF32, against PyTorch eager"
"$build/bin/plexus-bench" --only GDN --precision tf32 > "$logs/plexus-tf32.jsonl"
"$python" tools/bench/torch_bench.py --only GDN --precision tf32 > "$logs/torch-tf32.jsonl" 2> "$logs/torch.err"
"$python" tools/bench/compare.py "$logs/plexus-tf32.jsonl" "$logs/torch-tf32.jsonl" | tee "$logs/table-tf32.md"

echo "== memcheck (TF32 against the f64 reference, C = 3 to 256)"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 "$build/tests/gdn_test" \
  --gtest_filter='GDN.Tf32MatchesF64ReferenceCuda' > "$logs/memcheck.log" 2>&1
memcheck_rc=$?
grep -E "ERROR SUMMARY|PASSED|FAILED" "$logs/memcheck.log" | head -5

echo "== GDN 128 @128, TF32, PyTorch under torch.compile"
timeout 150 "$python" tools/bench/torch_bench.py --only "GDN 128 @128" --precision tf32 --compile-layers --no-compile \
  > "$logs/torch-compile-tf32.jsonl" 2> "$logs/torch-compile.err" || tail -5 "$logs/torch-compile.err"
"$python" tools/bench/compare.py "$logs/plexus-tf32.jsonl" "$logs/torch-compile-tf32.jsonl" | tee "$logs/table-compile-tf32.md"

echo
echo "SUMMARY: gdn_test rc=$test_rc; skipped: $skipped; memcheck rc=$memcheck_rc"
[ "$test_rc" -eq 0 ] && [ "$skipped" -eq 0 ] && [ "$memcheck_rc" -eq 0 ]
