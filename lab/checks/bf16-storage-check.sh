#!/usr/bin/env bash
# bf16 activation storage (bf16 precision), on a machine with an NVIDIA GPU,
# from the repository root:
#   bash lab/checks/bf16-storage-check.sh [ROUNDS]     # default 3
# Builds and runs the storage tests (conversions, the Net's choice of blob
# dtypes, GDN's and the convolutions' bf16 passes against their f32 passes)
# and the GDN and convolution layer tests, the storage tests once more under
# compute-sanitizer memcheck, then times the bundled models' bf16 training
# steps with f32 storage (PLEXUS_BF16_STORAGE=0) and bf16 storage, ROUNDS
# times, alternating, with each side's peak memory. MODELS (a plexus-bench
# --only text, default: all models) narrows the timed models; QUALITY=1
# also runs the bf16 training-quality test (three seeds at f32, tf32 and bf16).
# Logs go to $OUT (default bf16-storage-logs/); BUILD names the build folder.
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/checks/build-targets.sh
source lab/checks/step-ab.sh
logs=${OUT:-bf16-storage-logs}
build=${BUILD:-build-gpu}
rounds=${1:-3}
mkdir -p "$logs"
storage_tests=(bfloat16_test net_bf16_storage_test gdn_bf16_storage_test conv_bf16_storage_test elementwise_bf16_storage_test)
layer_tests=(gdn_test conv2d_test conv_transpose2d_test)
quality=()
[ "${QUALITY:-0}" = 1 ] && quality=(plexus_ae_bf16_train_test plexus-ae)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
build_targets "$logs" "$build" plexus-bench "${storage_tests[@]}" "${layer_tests[@]}" "${quality[@]}"
status=0
for t in "${storage_tests[@]}" "${layer_tests[@]}"; do run_gtest "$logs" "$build" "$t" || status=1; done
grep -h "SKIPPED" "$logs"/*_test.log | head -5
sanitizer=${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer
for t in gdn_bf16_storage_test conv_bf16_storage_test elementwise_bf16_storage_test net_bf16_storage_test; do
  if "$sanitizer" --tool memcheck --error-exitcode 1 "$build/tests/$t" --gtest_brief=1 --gtest_filter='*Cuda*' \
       > "$logs/$t-memcheck.log" 2>&1; then
    echo "$t memcheck: $(grep -E 'ERROR SUMMARY' "$logs/$t-memcheck.log")"
  else
    echo "$t memcheck: FAILED"; grep -E "ERROR SUMMARY|Invalid|Failure" "$logs/$t-memcheck.log" | head -10; status=1
  fi
done
if [ "${QUALITY:-0}" = 1 ]; then run_gtest "$logs" "$build" plexus_ae_bf16_train_test || status=1; fi
grep -h "mean settled" "$logs"/plexus_ae_bf16_train_test.log 2>/dev/null
step_ab "$logs" "$build" "$rounds" PLEXUS_BF16_STORAGE "f32 storage" "bf16 storage" || status=1
python3 - "$logs" << 'PY'
import glob, json, sys
peaks = {}
for path in sorted(glob.glob(f"{sys.argv[1]}/steps-PLEXUS_BF16_STORAGE*-round1.jsonl")):
    setting = "bf16" if "STORAGE1" in path else "f32"
    for line in open(path):
        row = json.loads(line)
        if row.get("kind") == "train_step_graph" and "peak_bytes" in row:
            peaks.setdefault(row["name"], {})[setting] = row["peak_bytes"] / 2**20
for name, by in peaks.items():
    print(f"peak memory {name:24} f32 storage {by.get('f32', 0):8.0f} MiB   bf16 storage {by.get('bf16', 0):8.0f} MiB")
PY
[ $status -eq 0 ] && echo "SUMMARY: bf16-storage-check passed" || echo "SUMMARY: bf16-storage-check FAILED"
exit $status
