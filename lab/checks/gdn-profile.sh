#!/usr/bin/env bash
# Where the tensor-core GDN kernels spend their time, on a machine with an NVIDIA GPU
# and Nsight Compute, from the repository root:
#   bash lab/checks/gdn-profile.sh
# Builds gdn-tiling-bench (for the local GPU unless CUDA_ARCH names architectures),
# runs it (byte floors and every tiling at 16x128x128x128), then profiles the
# layer's forward and backward kernels once each with `ncu --set full`
# (clocks not locked). Logs go to $OUT (or gdn-check-logs/).
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/checks/build-targets.sh
logs=${OUT:-gdn-check-logs}
mkdir -p "$logs"
build=${BUILD:-build-gpu}
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
start=$SECONDS
build_targets "$logs" "$build" gdn-tiling-bench
echo "built in $((SECONDS - start)) s"

echo "== tilings and products (16x128x128x128, the kernels alone)"
"$build/bin/gdn-tiling-bench" | tee "$logs/tilings.jsonl"

for kernel in normalize backward; do
  echo "== ncu: the layer's gdn_tensor_core_$kernel"
  timeout 120 "$ncu" --clock-control none --set full --import-source no -k "regex:gdn_tensor_core_$kernel" -c 1 \
    "$build/bin/gdn-tiling-bench" --repeats 1 > "$logs/ncu-$kernel.txt" 2>&1 || echo "ncu rc=$?"
  grep -E "Duration|Throughput|Pipe|Issue Slots|Bank|Registers|Achieved Occupancy|Stall|Warp Cycles" "$logs/ncu-$kernel.txt" | head -40
done
