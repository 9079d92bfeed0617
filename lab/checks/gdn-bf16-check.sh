#!/usr/bin/env bash
# The GDN kernels' BF16 products (bf16 precision), on a machine with an
# NVIDIA GPU, from the repository root:
#   bash lab/checks/gdn-bf16-check.sh [ROUNDS]     # default 3
# Builds and runs the GDN layer's tests and the CUDA cases of the
# convolution layers' (they share the tensor-core products), the
# gdn-tiling-bench (the C = 128 kernels alone, TF32 against BF16 products,
# beside their byte floors), then times the bundled models' bf16 training
# steps with TF32 products in the GDN kernels (PLEXUS_GDN_BF16=0) and BF16
# ones, ROUNDS times, alternating. MODELS (a plexus-bench --only text,
# default: all models) narrows the timed models; QUALITY=1 also runs the
# bf16 training-quality test (three seeds at f32, tf32 and bf16).
# Logs go to $OUT (default gdn-bf16-logs/); BUILD names the build folder.
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/checks/build-targets.sh
source lab/checks/step-ab.sh
logs=${OUT:-gdn-bf16-logs}
build=${BUILD:-build-gpu}
rounds=${1:-3}
mkdir -p "$logs"
quality=()
[ "${QUALITY:-0}" = 1 ] && quality=(plexus_ae_bf16_train_test plexus-ae)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
build_targets "$logs" "$build" plexus-bench gdn-tiling-bench gdn_test conv2d_test conv_transpose2d_test "${quality[@]}"
status=0
run_gtest "$logs" "$build" gdn_test || status=1
for t in conv2d_test conv_transpose2d_test; do
  run_gtest "$logs" "$build" "$t" "*Cuda*:*TensorCore*:*FewChannel*" || status=1
done
if [ "${QUALITY:-0}" = 1 ]; then run_gtest "$logs" "$build" plexus_ae_bf16_train_test || status=1; fi
grep -h "SKIPPED" "$logs"/*_test.log | head -5
grep -h "^\[ bf16\|^\[ tf32" "$logs/gdn_test.log" | sort | head -40 > "$logs/gdn-errors.txt"
grep -h "mean settled" "$logs"/plexus_ae_bf16_train_test.log 2>/dev/null
echo "== gdn-tiling-bench (16x128x128x128)"
"$build/bin/gdn-tiling-bench" | tee "$logs/tilings.jsonl" || status=1
step_ab "$logs" "$build" "$rounds" PLEXUS_GDN_BF16 "GDN TF32 products" "GDN BF16 products" || status=1
[ $status -eq 0 ] && echo "SUMMARY: gdn-bf16-check passed" || echo "SUMMARY: gdn-bf16-check FAILED"
exit $status
