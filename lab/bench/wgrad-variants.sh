#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (sm_90), from the repository root:
#   bash lab/bench/wgrad-variants.sh [BK,STAGES[,BN,BLOCKS] ...]      (default: 16,3 16,4 32,3 32,4)
# Tunes the tap-major weight gradient of the implicit-GEMM engine: for each
# (BK, STAGES) of WeightGradNhwcTile (layers/convolution/implicit_gemm_common.cuh;
# with TILE=WeightGradBf16Tile, the BF16-operand kernel's tile in
# layers/convolution/implicit_gemm_weight_grad.cu, which only bf16 products use) it
# rebuilds plexus-bench with that tile and times the 128->128 convolution
# rows (whole backward: NHWC copy, weight gradient and input gradient) at
# tf32 and bf16, then prints one table of backward milliseconds. With
# BASELINE_SOURCE=FILE, an implicit_gemm_weight_grad.cu to compare against
# (e.g. the previous version, `git show
# HEAD~1:layers/convolution/implicit_gemm_weight_grad.cu`) gets a row too. The
# sources are edited in place and restored on exit. Logs go to
# $OUT/variants (default bench-logs/variants); the build to $BUILD (default build-gpu).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-bench-logs}/variants
mkdir -p "$out"
build=${BUILD:-build-gpu}
only=${ONLY:-128->128}
tile=${TILE:-WeightGradNhwcTile}
source_file=layers/convolution/implicit_gemm_common.cuh
kernel_file=layers/convolution/implicit_gemm_weight_grad.cu
case "$tile" in
  WeightGradNhwcTile) ;;
  WeightGradBf16Tile) source_file=$kernel_file ;;
  *) echo "wgrad-variants: unknown TILE $tile" >&2; exit 1 ;;
esac
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(16,3 16,4 32,3 32,4)

backup=$(mktemp) kernel_backup=$(mktemp)
cp "$source_file" "$backup"
cp "$kernel_file" "$kernel_backup"
trap 'cp "$backup" "$source_file"; cp "$kernel_backup" "$kernel_file"; rm -f "$backup" "$kernel_backup"' EXIT

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DPLEXUS_BUILD_BENCH=ON \
  > "$out/configure.log" 2>&1

# Builds plexus-bench from the current source and times the rows into $out/$1-<precision>.jsonl.
bench_variant() {
  local name=$1
  if ! cmake --build "$build" -j "$(nproc)" --target plexus-bench > "$out/build-$name.log" 2>&1; then
    tail -40 "$out/build-$name.log"
    echo "wgrad-variants: build of $name failed" >&2
    return 1
  fi
  for precision in tf32 bf16; do
    "$build/bin/plexus-bench" --cases lab/bench/bench_cases.json --precision "$precision" --only "$only" \
      > "$out/$name-$precision.jsonl"
  done
}

names=()
if [ -n "${BASELINE_SOURCE:-}" ]; then
  cp "$BASELINE_SOURCE" "$kernel_file"
  bench_variant baseline
  cp "$kernel_backup" "$kernel_file"
  names+=(baseline)
fi
for variant in "${variants[@]}"; do
  # BK,STAGES or BK,STAGES,BN,BLOCKS (BN 128 and 2 blocks per multiprocessor unless given).
  IFS=, read -r bk stages bn blocks <<< "$variant"
  bn=${bn:-128} blocks=${blocks:-2}
  tile_text="Tile<128, $bn, 2, 4, $bk, $stages, $blocks>"
  cp "$backup" "$source_file"
  sed -i -E "s/^using $tile = Tile<[0-9, ]+>;/using $tile = $tile_text;/" "$source_file"
  grep -q "^using $tile = $tile_text;" "$source_file" ||
    { echo "wgrad-variants: cannot set $tile in $source_file" >&2; exit 1; }
  name="bk$bk-s$stages$([ "$bn" = 128 ] || echo "-bn$bn")$([ "$blocks" = 2 ] || echo "-b$blocks")"
  bench_variant "$name"
  names+=("$name")
done

# One table: rows = layers, columns = variant x precision, backward ms.
python3 - "$out" "${names[@]}" <<'EOF' | tee "$out/table.md"
import json, sys
out, names = sys.argv[1], sys.argv[2:]
columns = [(n, p) for p in ("tf32", "bf16") for n in names]
times, rows = {}, []
for n, p in columns:
    with open(f"{out}/{n}-{p}.jsonl") as f:
        for line in f:
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r.get("kind") != "layer":
                continue
            if r["name"] not in rows:
                rows.append(r["name"])
            times[(r["name"], n, p)] = r["backward_ms"]
print("| backward ms | " + " | ".join(f"{n} {p}" for n, p in columns) + " |")
print("|---|" + "---:|" * len(columns))
for row in rows:
    print(f"| {row} | " + " | ".join(f"{times.get((row, n, p), float('nan')):.3f}" for n, p in columns) + " |")
EOF
