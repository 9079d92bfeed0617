#!/usr/bin/env bash
# A convolution kernel path that an environment switch turns off, on a
# machine with an NVIDIA Hopper GPU, from the repository root:
#   bash lab/checks/conv-switch-check.sh SWITCH [ROUNDS]     # default 3 rounds
# e.g. SWITCH = PLEXUS_CONV_WGMMA_TMA (the TMA-fed gather) or
# PLEXUS_CONV_WGMMA_WGRAD_NHWC (the weight gradient from NHWC boxes).
# Builds the convolution tests and plexus-bench; runs the tests with the
# path on (the default) and off (SWITCH=0), memcheck over the tensor-core
# tests, records one hyperprior step's kernels to show which gather, weight
# gradient and operand copy kernels ran and how long they took
# (plexus-bench --timeline), and times the bf16 steps of the bmshj2018
# models both ways (lab/checks/step-ab.sh).
# Logs go to $OUT (default conv-switch-logs/); BUILD names the build folder.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source lab/checks/build-targets.sh
source lab/checks/step-ab.sh
switch=${1:?usage: conv-switch-check.sh SWITCH [ROUNDS]}
logs=${OUT:-conv-switch-logs}
build=${BUILD:-build-gpu}
rounds=${2:-3}
mkdir -p "$logs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
build_targets "$logs" "$build" conv2d_test conv_transpose2d_test conv_bf16_storage_test \
  convolution_kept_source_test convolution_shared_scratch_test plexus-bench
status=0
for setting in 1 0; do
  echo "== tests, $switch=$setting"
  for t in conv2d_test conv_transpose2d_test conv_bf16_storage_test convolution_kept_source_test \
           convolution_shared_scratch_test; do
    if ! env "$switch=$setting" timeout 120 "$build/tests/$t" --gtest_brief=1 > "$logs/$t-$setting.log" 2>&1; then
      status=1
      echo "$t: FAILED"
      grep -E "Failure|Expected|Which is|error" "$logs/$t-$setting.log" | head -20
    else
      echo "$t: $(grep -E '^\[  PASSED' "$logs/$t-$setting.log")"
    fi
  done
done
echo "== memcheck over the tensor-core tests"
for t in conv2d_test conv_transpose2d_test; do
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 "$build/tests/$t" --gtest_filter='*TensorCore*' \
    > "$logs/memcheck-$t.log" 2>&1 || status=1
  grep -E "ERROR SUMMARY" "$logs/memcheck-$t.log" | tail -1
done
echo "== gathers, weight gradients and operand copies of one hyperprior step"
"$build/bin/plexus-bench" --precision bf16 --models --only bmshj2018-hyperprior --timeline "$logs/timeline.jsonl" \
  > /dev/null 2> "$logs/timeline.err" || status=1
python3 - "$logs/timeline.jsonl" << 'PY'
import collections, json, re, sys
count, time = collections.Counter(), collections.Counter()
for line in open(sys.argv[1]):
    row = json.loads(line)
    if row.get("kind") == "kernel" and row.get("step") == 1 and any(
            part in row["name"] for part in ("gather", "weight_grad", "phases_kernel", "shifted_rows", "nhwc")):
        name = re.sub(r"(<unnamed>|[A-Za-z_]+)::", "", row["name"].split("(")[0])[:60]
        count[name] += 1
        time[name] += row["end_us"] - row["start_us"]
for name in count:
    print(f"{name:60} {count[name]:3} kernels {time[name]:8.1f} us")
PY
echo "== steps, $switch=0 and =1"
MODELS="bmshj2018" step_ab "$logs" "$build" "$rounds" "$switch" off on || status=1
[ $status -eq 0 ] && echo "SUMMARY: conv-switch-check done" || echo "SUMMARY: conv-switch-check FAILED"
exit $status
