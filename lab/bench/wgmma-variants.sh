#!/usr/bin/env bash
# On a machine with a Hopper GPU (compute capability 9.0), from the repository root:
#   bash lab/bench/wgmma-variants.sh [STAGES,IN_FLIGHT ...]   (default: 3,0 3,1 4,0 4,1)
# Tunes the wgmma gather of the implicit-GEMM engine (forward and
# backward_data, layers/convolution/implicit_gemm_wgmma.cu): for each ring depth
# STAGES and number of wgmma stages left in flight IN_FLIGHT (kStages,
# kWgmmaInFlight) it rebuilds, runs the tensor-core convolution tests
# (every pass against f64, TF32 and BF16) and times the 128->128
# convolution rows at tf32 and bf16 with plexus-bench; the mma.sync kernels
# (PLEXUS_CONV_WGMMA=0) get a row too. Prints one table of forward / backward
# milliseconds. The source is edited in place and restored on exit. Logs go
# to $OUT/wgmma-variants (default bench-logs/wgmma-variants); the build to
# $BUILD (default build-gpu).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-bench-logs}/wgmma-variants
mkdir -p "$out"
build=${BUILD:-build-gpu}
only=${ONLY:-128->128}
kernel_file=layers/convolution/implicit_gemm_wgmma.cu
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(3,0 3,1 4,0 4,1)

backup=$(mktemp)
cp "$kernel_file" "$backup"
trap 'cp "$backup" "$kernel_file"; rm -f "$backup"' EXIT

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DPLEXUS_BUILD_BENCH=ON \
  > "$out/configure.log" 2>&1

# Times the rows into $out/$1-<precision>.jsonl with the current build (environment passed through).
bench_rows() {
  for precision in tf32 bf16; do
    "$build/bin/plexus-bench" --cases lab/bench/bench_cases.json --precision "$precision" --only "$only" \
      > "$out/$1-$precision.jsonl"
  done
}

names=()
for variant in "${variants[@]}"; do
  stages=${variant%,*} in_flight=${variant#*,}
  name="s$stages-f$in_flight"
  cp "$backup" "$kernel_file"
  sed -i -E "s/^constexpr int kStages = [0-9]+;/constexpr int kStages = $stages;/; s/^constexpr int kWgmmaInFlight = [0-9]+;/constexpr int kWgmmaInFlight = $in_flight;/" \
    "$kernel_file"
  grep -q "^constexpr int kStages = $stages;" "$kernel_file" && grep -q "^constexpr int kWgmmaInFlight = $in_flight;" "$kernel_file" ||
    { echo "wgmma-variants: cannot set the variant in $kernel_file" >&2; exit 1; }
  if ! cmake --build "$build" -j "$(nproc)" --target plexus-bench conv2d_test conv_transpose2d_test \
      > "$out/build-$name.log" 2>&1; then
    tail -40 "$out/build-$name.log"
    echo "$name: build FAILED"
    continue
  fi
  tests=passed
  for t in conv2d_test conv_transpose2d_test; do
    timeout 300 "$build/tests/$t" --gtest_brief=1 --gtest_filter='*TensorCore*' > "$out/$t-$name.log" 2>&1 ||
      tests=FAILED
  done
  echo "$name: tensor-core tests $tests"
  [ "$tests" = passed ] || continue
  bench_rows "$name"
  names+=("$name")
  if [ ${#names[@]} = 1 ]; then PLEXUS_CONV_WGMMA=0 bench_rows mma-sync; names+=(mma-sync); fi
done

python3 - "$out" "${names[@]}" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
def rows(path):
    return {r["name"]: r for r in (json.loads(l) for l in open(path) if l.startswith("{")) if r.get("kind") == "layer"}
for precision in ("tf32", "bf16"):
    table = {n: rows(f"{out}/{n}-{precision}.jsonl") for n in names}
    print(f"\n{precision}: forward / backward ms")
    print("| row | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for row in table[names[0]]:
        print(f"| {row} | " + " | ".join(
            f"{table[n][row]['forward_ms']:.3f} / {table[n][row]['backward_ms']:.3f}" if row in table[n] else "-"
            for n in names) + " |")
PY
