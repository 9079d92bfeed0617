#!/usr/bin/env bash
# The training loop at full speed, on a machine with an NVIDIA GPU, from the
# repository root:
#   bash lab/checks/train-loop-check.sh IMAGE_FOLDER [SECONDS]
# IMAGE_FOLDER: training images (e.g. the BSDS500 train split,
# www2.eecs.berkeley.edu/Research/Projects/CS/vision/grouping/resources.html).
# Builds plexus, plexus-ae, plexus-bench and the step/graph/input tests for
# sm_90, runs those tests (and compute-sanitizer memcheck over their CUDA
# cases), then measures at plexus-ae train's default precision (bf16; set
# PRECISION=tf32 or f32 for another):
#   1. plexus-bench: the eager and CUDA-graph training step of bls2017 and
#      bmshj2018-factorized (batch 16, 256x256) and a per-node breakdown
#      with FLOP/byte floors (--profile);
#   2. plexus-ae train end to end (data loading included, default --threads)
#      for SECONDS (default 30) per model, with --cuda-graph on and off,
#      reporting the mean images/s of its log windows after the first and
#      how long they waited for the loader.
# SECONDS 0 stops after the tests.
# Logs go to $OUT (or train-loop-logs/). stb may be given as STB_INCLUDE_DIR.
set -uo pipefail
data=${1:?usage: lab/checks/train-loop-check.sh IMAGE_FOLDER [SECONDS]}
data=$(realpath "$data")
seconds=${2:-30}
precision=${PRECISION:-bf16}
cd "$(dirname "$0")/../.."
logs=${OUT:-train-loop-logs}
mkdir -p "$logs"
build=${BUILD:-build-gpu}
stb_flag=()
[ -n "${STB_INCLUDE_DIR:-}" ] && stb_flag=(-DSTB_INCLUDE_DIR="$STB_INCLUDE_DIR")
tests=(step_graph_test step_metrics_test device_input_test batch_loader_test patch_sampler_test grad_clip_test
       optimizer_test uniform_noise_test net_test plexus_ae_cuda_graph_test plexus_ae_eval_test)

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$logs/gpu.txt"
echo "== build"
if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "${stb_flag[@]}" &&
       cmake --build "$build" -j "$(nproc)" --target plexus plexus-ae plexus-bench "${tests[@]}"; } \
       > "$logs/build.log" 2>&1; then
  tail -60 "$logs/build.log"
  echo "SUMMARY: build FAILED"
  exit 1
fi

echo "== tests"
failed=0
for t in "${tests[@]}"; do
  if "$build/tests/$t" > "$logs/test-$t.log" 2>&1; then
    echo "$t: $(grep -E '^\[  PASSED  \]' "$logs/test-$t.log") $(grep -cE '^\[  SKIPPED \]' "$logs/test-$t.log") skipped"
  else
    failed=$((failed + 1))
    echo "$t: FAILED"
    grep -E "Failure|FAILED|error|Expected|Which is|actual" "$logs/test-$t.log" | head -30
  fi
  grep -E "^\[ info \]" "$logs/test-$t.log"
done

echo "== compute-sanitizer memcheck over the CUDA tests of the step machinery"
for t in step_graph_test step_metrics_test device_input_test grad_clip_test optimizer_test; do
  compute-sanitizer --tool memcheck --error-exitcode 99 "$build/tests/$t" --gtest_filter='*Cuda*' \
    > "$logs/memcheck-$t.log" 2>&1
  echo "$t: rc=$? $(grep -E 'ERROR SUMMARY' "$logs/memcheck-$t.log" | tail -1)"
done

if [ "$seconds" = 0 ]; then
  echo "SUMMARY: tests failed: $failed"
  exit 0
fi

echo "== plexus-bench ($precision): eager and graph steps, per-node profile"
for model in bls2017 bmshj2018-factorized; do
  "$build/bin/plexus-bench" --cases lab/bench/bench_cases.json --precision "$precision" --only "$model" --profile
done > "$logs/bench.jsonl" 2> "$logs/bench.err"
grep -E '"train_step|"ceilings"' "$logs/bench.jsonl"

echo "== plexus-ae train, ${seconds} s each ($precision, batch 16, 256x256)"
for model in bls2017 bmshj2018-factorized; do
  for graph in on off; do
    run=/tmp/train-loop-run-$model-$graph
    rm -rf "$run"
    "$build/bin/plexus-ae" train --data "$data" --model "$model" --batch 16 --patch 256 --precision "$precision" \
      --steps 1000000 --time-limit "$seconds" --log-every 50 --checkpoint-every 0 --cuda-graph "$graph" \
      --out "$run" > "$logs/train-$model-$graph.log" 2>&1
    rc=$?
    rate=$(python3 - "$run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l]
steady = rows[1:-1] or rows
print(f"{sum(r['images_per_second'] for r in steady) / len(steady):.0f} img/s over {len(steady)} windows, "
      f"loader wait {1000 * sum(r.get('loader_wait_seconds', 0) for r in steady) / len(steady):.1f} ms per window, "
      f"last loss {rows[-1]['loss']:.3f}")
PY
)
    echo "train $model --cuda-graph $graph: rc=$rc $rate; $(grep -m1 'CUDA graph' "$logs/train-$model-$graph.log")"
  done
done
echo "SUMMARY: tests failed: $failed"
