#!/usr/bin/env bash
# GDN / IGDN on a machine with an NVIDIA GPU, from the repository root:
#   bash lab/checks/gdn-check.sh
# Builds only libplexus, gdn_test, plexus-bench and gdn-tiling-bench (for the
# local GPU unless CUDA_ARCH names architectures), runs the GDN tests with CUDA (fails
# if any is skipped) and the TF32 accuracy test under compute-sanitizer
# memcheck, times the TF32 kernels under other warp tilings and against a
# streaming kernel over the same bytes (gdn-tiling-bench), then the GDN and
# IGDN benchmark rows with Plexus and PyTorch side by side: strict f32, TF32
# (`--precision tf32` on both sides), and PyTorch under torch.compile at TF32
# for the 16x128x128x128 row.
# Logs and JSON lines go to $OUT (or gdn-check-logs/).
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/checks/build-targets.sh
logs=${OUT:-gdn-check-logs}
mkdir -p "$logs"
build=${BUILD:-build-gpu}
python=${PYTHON:-python3}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
echo "== configure + build (plexus, gdn_test, plexus-bench, gdn-tiling-bench)"
start=$SECONDS
build_targets "$logs" "$build" plexus gdn_test plexus-bench gdn-tiling-bench
echo "built in $((SECONDS - start)) s"

echo "== gdn_test"
start=$SECONDS
"$build/tests/gdn_test" > "$logs/gdn_test.log" 2>&1
test_rc=$?
echo "gdn_test in $((SECONDS - start)) s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|^\[  FAILED|TF32     |Failure|error" "$logs/gdn_test.log" | head -80
skipped=$(grep -c "^\[  SKIPPED \]" "$logs/gdn_test.log")

echo "== memcheck (TF32 against the f64 reference, C = 3 to 256)"
compute-sanitizer --tool memcheck --error-exitcode 99 "$build/tests/gdn_test" \
  --gtest_filter='GDN.Tf32MatchesF64ReferenceCuda' > "$logs/memcheck.log" 2>&1
memcheck_rc=$?
grep -E "ERROR SUMMARY|PASSED|FAILED" "$logs/memcheck.log" | head -5

echo "== TF32 kernels alone at 16x128x128x128: byte floors and warp tilings"
"$build/bin/gdn-tiling-bench" | tee "$logs/tilings.jsonl"

echo "== GDN benchmarks, strict f32"
"$build/bin/plexus-bench" --only GDN > "$logs/plexus-f32.jsonl"
"$python" lab/bench/torch_bench.py --only GDN > "$logs/torch-f32.jsonl"
"$python" lab/bench/compare.py "$logs/plexus-f32.jsonl" "$logs/torch-f32.jsonl" | tee "$logs/table-f32.md"
echo "== GDN benchmarks, TF32"
"$build/bin/plexus-bench" --only GDN --precision tf32 > "$logs/plexus-tf32.jsonl"
"$python" lab/bench/torch_bench.py --only GDN --precision tf32 > "$logs/torch-tf32.jsonl"
"$python" lab/bench/compare.py "$logs/plexus-tf32.jsonl" "$logs/torch-tf32.jsonl" | tee "$logs/table-tf32.md"
echo "== GDN 128 @128, TF32, PyTorch under torch.compile"
timeout 240 "$python" lab/bench/torch_bench.py --only "GDN 128 @128" --precision tf32 --compile-layers --no-compile > "$logs/torch-compile-tf32.jsonl" \
  2> "$logs/torch-compile.err" || tail -5 "$logs/torch-compile.err"
"$python" lab/bench/compare.py "$logs/plexus-tf32.jsonl" "$logs/torch-compile-tf32.jsonl" |
  tee "$logs/table-compile-tf32.md"

echo
echo "SUMMARY: gdn_test rc=$test_rc; skipped: $skipped; memcheck rc=$memcheck_rc"
[ "$test_rc" -eq 0 ] && [ "$skipped" -eq 0 ] && [ "$memcheck_rc" -eq 0 ]
