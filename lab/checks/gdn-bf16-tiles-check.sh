#!/usr/bin/env bash
# GDN's kernels on bf16 tiles (layers/gdn/gdn_bf16_tiles.cu), on a machine
# with an NVIDIA GPU, from the repository root:
#   bash lab/checks/gdn-bf16-tiles-check.sh [ROUNDS]     # default 3
# Builds and runs the GDN layer's tests, then times the bundled models'
# bf16 training steps with the bf16-tile kernels off (PLEXUS_GDN_BF16_TILES=0:
# the tensor-core kernels on f32 tiles) and on, ROUNDS times, alternating,
# and with PROFILE (model names) each named model's step per node, off
# against on (plexus-bench --profile, lab/bench/profile_table.py). MODELS (a
# plexus-bench --only text) narrows the timed models. Logs go to $OUT
# (default gdn-bf16-tiles-logs/); BUILD names the build folder.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source lab/checks/build-targets.sh
source lab/checks/step-ab.sh
logs=${OUT:-gdn-bf16-tiles-logs}
build=${BUILD:-build-gpu}
rounds=${1:-3}
mkdir -p "$logs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
build_targets "$logs" "$build" plexus-bench gdn_test gdn_bf16_storage_test net_bf16_storage_test
status=0
for t in gdn_bf16_storage_test gdn_test net_bf16_storage_test; do
  run_gtest "$logs" "$build" "$t" || status=1
done
for model in ${PROFILE:-}; do
  for setting in 0 1; do
    PLEXUS_GDN_BF16_TILES=$setting "$build/bin/plexus-bench" --precision bf16 --models --only "$model" --profile \
      > "$logs/profile-tiles$setting-$model.jsonl" 2>> "$logs/profile.err" || status=1
  done
  echo "== $model per node: bf16 tiles off (left) against on (right)"
  python3 lab/bench/profile_table.py "$logs/profile-tiles0-$model.jsonl" "$logs/profile-tiles1-$model.jsonl" || status=1
done
step_ab "$logs" "$build" "$rounds" PLEXUS_GDN_BF16_TILES "GDN f32 tiles" "GDN bf16 tiles" || status=1
[ $status -eq 0 ] && echo "SUMMARY: gdn-bf16-tiles-check passed" || echo "SUMMARY: gdn-bf16-tiles-check FAILED"
exit $status
