#!/usr/bin/env bash
# Is the input pipeline keeping up with the GPU? On a machine with an NVIDIA
# GPU, from the repository root:
#   bash lab/checks/input-pipeline-check.sh IMAGE_FOLDER [SECONDS]
# IMAGE_FOLDER: training images (e.g. the BSDS500 train split,
# www2.eecs.berkeley.edu/Research/Projects/CS/vision/grouping/resources.html).
# A shorter lab/checks/train-loop-check.sh: builds for sm_90 only what it needs,
# runs the CUDA input and gradient-clipping tests, then measures
#   1. plexus-loader-bench: CPU ms per batch and BatchLoader images/s with 1
#      thread and with plexus-ae's default thread count;
#   2. plexus-bench (TF32): the eager and CUDA-graph training steps of
#      bls2017 and bmshj2018-factorized (batch 16, 256x256);
#   3. plexus-ae train end to end (graph on, default --threads) for SECONDS
#      (default 15) per model: the mean images/s of its log windows after the
#      first, as a percentage of the graph step, and the seconds per window
#      the loop waited for the loader; bls2017 once more with
#      --clip-grad-norm 0 (the benchmarked step does not clip), to show what
#      the default clipping costs.
# Logs (8 files) go to $OUT (or input-pipeline-logs/).
set -uo pipefail
data=${1:?usage: lab/checks/input-pipeline-check.sh IMAGE_FOLDER [SECONDS]}
data=$(realpath "$data")
seconds=${2:-15}
cd "$(dirname "$0")/../.."
source lab/checks/build-targets.sh
logs=${OUT:-input-pipeline-logs}
mkdir -p "$logs"
build=${BUILD:-build-gpu}
cores=$(nproc)
default_threads=$(( cores > 1 ? cores - 1 : 1 )); (( default_threads > 8 )) && default_threads=8

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$logs/gpu.txt"
echo "== build"
start=$SECONDS
build_targets "$logs" "$build" plexus-ae plexus-bench plexus-loader-bench device_input_test grad_clip_test
echo "built in $((SECONDS - start)) s"

echo "== tests"
for t in device_input_test grad_clip_test; do
  "$build/tests/$t" > "/tmp/$t.log" 2>&1
  echo "$t: rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "/tmp/$t.log" | tr '\n' ' ')"
  cat "/tmp/$t.log" >> "$logs/tests.log"
done

echo "== plexus-loader-bench (threads 1 and $default_threads)"
"$build/bin/plexus-loader-bench" --data "$data" --threads "1,$default_threads" --seconds 1 | tee "$logs/loader-bench.jsonl"

echo "== plexus-bench (TF32)"
for model in bls2017 bmshj2018-factorized; do
  "$build/bin/plexus-bench" --cases lab/bench/bench_cases.json --precision tf32 --only "$model"
done > "$logs/bench.jsonl" 2> /tmp/input-pipeline-bench.err || tail -20 /tmp/input-pipeline-bench.err
grep -E '"train_step' "$logs/bench.jsonl"

echo "== plexus-ae train, ${seconds} s each (TF32, batch 16, 256x256, graph on)"
for variant in bls2017 bmshj2018-factorized "bls2017 --clip-grad-norm 0"; do
  read -r model extra <<< "$variant"
  name=$model${extra:+-no-clip}
  run=/tmp/input-pipeline-run-$name
  rm -rf "$run"
  # shellcheck disable=SC2086  # $extra is empty or one option and its value
  "$build/bin/plexus-ae" train --data "$data" --model "$model" --batch 16 --patch 256 --precision tf32 \
    --steps 1000000 --time-limit "$seconds" --log-every 50 --checkpoint-every 0 --cuda-graph on $extra \
    --out "$run" > "$run.log" 2>&1
  rc=$?
  [ "$rc" = 0 ] || tail -20 "$run.log"
  cp "$run/metrics.jsonl" "$logs/metrics-$name.jsonl" 2>/dev/null
  python3 - "$run/metrics.jsonl" "$logs/bench.jsonl" "$model" "$rc" "$extra" <<'PY'
import json, sys
metrics, bench, model, rc, extra = sys.argv[1:]
rows = [json.loads(l) for l in open(metrics) if '"train"' in l]
steady = rows[1:-1] or rows
rate = sum(r['images_per_second'] for r in steady) / len(steady)
wait = sum(r.get('loader_wait_seconds', 0) for r in steady) / len(steady)
graph = [json.loads(l) for l in open(bench) if '"train_step_graph"' in l and f'"{model}"' in l]
share = f"{100 * rate / graph[0]['images_per_s']:.0f}% of the graph step" if graph else "no graph step measured"
print(f"train {model} {extra}: rc={rc} {rate:.0f} img/s over {len(steady)} windows = {share}; "
      f"loader wait {1000 * wait:.1f} ms per 50-step window; last loss {rows[-1]['loss']:.3f}")
PY
done
