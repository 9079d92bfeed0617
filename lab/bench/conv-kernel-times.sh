#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (sm_90) and Nsight Compute, from the
# repository root, after plexus-bench is built (e.g. by python3 lab/harness/harness.py perf Conv2d
# --build build-gpu):
#   bash lab/bench/conv-kernel-times.sh [PRECISION] [LAYER]
#   (defaults: bf16, "Conv2d 5x5/2 128->128 @128"; LAYER is a plexus-bench row name)
# Lists every kernel of one forward and backward of that convolution row with
# its duration under Nsight Compute (which runs each kernel alone, at base
# clocks): where a pass's time goes between the copies to NHWC, the GEMMs and
# the split-K reduction. Writes $OUT/kernel-times.txt (default bench-logs/);
# plexus-bench from $BUILD (default build-gpu).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-bench-logs}
mkdir -p "$out"
build=${BUILD:-build-gpu}
precision=${1:-bf16}
layer=${2:-"Conv2d 5x5/2 128->128 @128"}
command -v ncu > /dev/null || { echo "conv-kernel-times: ncu (Nsight Compute) not found" >&2; exit 1; }
ncu --launch-count 24 --section SpeedOfLight "$build/bin/plexus-bench" --precision "$precision" --only "$layer" \
  --warmup 0 --repeats 1 > "$out/ncu-$precision.txt" 2>&1
# One line per kernel: duration, then the kernel's name and launch shape.
awk '/^  [^ =].*\(.*\)x\(/ { name = $0; sub(/^  /, "", name); sub(/, Context.*/, "", name) }
     /^    Duration/ { printf "%10s %s  %s\n", $3, $2, name }' "$out/ncu-$precision.txt" | tee "$out/kernel-times.txt"
