#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (sm_90), from the repository root:
#   bash lab/bench/conv-tile-sweep.sh [--keep-fastest] [TILE ...]
#   e.g. bash lab/bench/conv-tile-sweep.sh 'Tile<128, 128, 2, 4, 32, 2>' 'Tile<128, 128, 2, 4, 32, 3>'
# Compares tiles (BM, BN, warps along M and N, BK, stages[, blocks per
# multiprocessor]) of the
# implicit-GEMM engine's tap-major gather (NhwcGatherTile in
# layers/convolution/implicit_gemm_common.cuh): for each candidate it rewrites that line,
# rebuilds plexus-bench and times the convolution rows at tf32 and bf16
# (Plexus only, whole passes: the NHWC copy included), then prints per
# candidate the summed forward + backward ms of the 128-channel rows.
# The file is restored afterwards, or with --keep-fastest left on the fastest
# candidate (to test it next, e.g. with
#   python3 lab/harness/harness.py test grad Conv2d ConvTranspose2d --memcheck).
# Logs go to $OUT (default conv-sweep-logs/).
set -euo pipefail
cd "$(dirname "$0")/../.."
logs=${OUT:-conv-sweep-logs}
mkdir -p "$logs"
build=${BUILD:-build-gpu}
keep=0
[ "${1:-}" = "--keep-fastest" ] && { keep=1; shift; }
candidates=("$@")
[ ${#candidates[@]} -gt 0 ] || candidates=('Tile<128, 128, 2, 4, 32, 2>' 'Tile<128, 128, 2, 4, 32, 3>'
                                            'Tile<128, 128, 2, 4, 32, 4>' 'Tile<128, 128, 2, 4, 64, 2>')
source_file=layers/convolution/implicit_gemm_common.cuh
grep -q '^using NhwcGatherTile = Tile<.*>;$' "$source_file" || { echo "no NhwcGatherTile line in $source_file" >&2; exit 1; }
backup=$(mktemp)
cp "$source_file" "$backup"
trap 'cp "$backup" "$source_file"' EXIT

# On a Hopper the tap-major passes run the wgmma kernels, not this tile: time the mma.sync ones.
export PLEXUS_CONV_WGMMA=0
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DPLEXUS_BUILD_BENCH=ON \
  > "$logs/sweep-configure.log" 2>&1
summary="$logs/sweep.txt"
: > "$summary"
best="" best_ms=""
for tile in "${candidates[@]}"; do
  sed -i "s/^using NhwcGatherTile = Tile<.*>;$/using NhwcGatherTile = $tile;/" "$source_file"
  name=$(echo "$tile" | tr -cd '0-9,' | tr ',' '-')
  if ! cmake --build "$build" -j "$(nproc)" --target plexus-bench > "$logs/sweep-build-$name.log" 2>&1; then
    echo "$tile: build FAILED (see sweep-build-$name.log)" | tee -a "$summary"
    continue
  fi
  : > "$logs/sweep-$name.jsonl"
  for precision in tf32 bf16; do
    "$build/bin/plexus-bench" --cases lab/bench/bench_cases.json --precision "$precision" --only Conv \
      >> "$logs/sweep-$name.jsonl"
  done
  ms=$(python3 -c '
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
print("%.3f" % sum(r["forward_ms"] + r["backward_ms"] for r in rows if "128->128" in r["name"]))
' "$logs/sweep-$name.jsonl")
  echo "$tile: 128-channel rows fwd+bwd at tf32 and bf16, summed: $ms ms" | tee -a "$summary"
  if [ -z "$best" ] || python3 -c "import sys; sys.exit(0 if $ms < $best_ms else 1)"; then
    best=$tile best_ms=$ms
  fi
done
echo "fastest: $best ($best_ms ms)" | tee -a "$summary"
if [ "$keep" = 1 ] && [ -n "$best" ]; then
  sed -i "s/^using NhwcGatherTile = Tile<.*>;$/using NhwcGatherTile = $best;/" "$backup"
fi
