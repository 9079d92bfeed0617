#!/usr/bin/env bash
# A short check of the scale-hyperprior model on a machine with an NVIDIA
# GPU, within about four minutes: builds plexus-ae and the tests of the new
# layers (Release), runs their CUDA gradient checks and CPU/CUDA parity, then
# trains the lambda family (tools/train-family.sh) for a short budget and
# prints each process's steps and img/s, from which the length of a full run
# is planned.
#
#   lab/checks/hyperprior-gpu-smoke.sh BSDS500_TRAIN_DIR [TRAIN_SECONDS]
#
#   BSDS500_TRAIN_DIR  the 400 training photos of BSDS500, the Berkeley
#                      segmentation data set (BSR/BSDS500/data/images/train)
#   TRAIN_SECONDS      training budget of each process [60]; shortened when
#                      the build took long, so the whole script stays
#                      within SMOKE_SECONDS [225]
# Environment: BUILD (build folder) [/tmp/build-hyperprior-smoke], RUNS (the
# training runs) [/tmp/hyperprior-smoke-runs], CMAKE_ARGS (e.g.
# -DCMAKE_CUDA_ARCHITECTURES=90), OUT (six log files) [hyperprior-smoke-out].
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 BSDS500_TRAIN_DIR [TRAIN_SECONDS]" >&2
  exit 2
fi
data=$(realpath "$1")
train_seconds=${2:-60}
start=$SECONDS
cd "$(dirname "$0")/../.."
build=${BUILD:-/tmp/build-hyperprior-smoke}
out=$(mkdir -p "${OUT:-hyperprior-smoke-out}" && realpath "${OUT:-hyperprior-smoke-out}")
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"

# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} > "$out/configure.log"
cmake --build "$build" -j "$(nproc)" --target plexus-ae gaussian_conditional_test abs_test rate_loss_test \
  half_test > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "built in $((SECONDS - start)) s"

# The new layers' tests, CUDA included (a skipped CUDA test fails the check).
: > "$out/tests.log"
for test in gaussian_conditional_test abs_test rate_loss_test half_test; do
  "$build/tests/$test" > "/tmp/$test.log" 2>&1 || { cat "/tmp/$test.log" >> "$out/tests.log"; cat "/tmp/$test.log"; exit 1; }
  cat "/tmp/$test.log" >> "$out/tests.log"
  if grep -q "SKIPPED \]" "/tmp/$test.log"; then
    echo "$test: a test was skipped on the GPU machine:"; grep -A2 "SKIPPED \]" "/tmp/$test.log"; exit 1
  fi
  grep -E "^\[  PASSED  \]" "/tmp/$test.log" | sed "s/^/$test: /"
done

# Whatever time is left, less about 30 s for start-up, final validation and export.
budget=$(( ${SMOKE_SECONDS:-225} - (SECONDS - start) - 30 ))
[ "$budget" -ge "$train_seconds" ] || train_seconds=$budget
if [ "$train_seconds" -lt 15 ]; then
  echo "a training budget of ${train_seconds} s (${budget} s left after the build) is too short to measure; not training"
  exit 1
fi
echo "training the family for ${train_seconds} s"
runs=${RUNS:-/tmp/hyperprior-smoke-runs}
rm -rf "$runs"
status=0
OUT="$runs" PLEXUS_AE="$build/bin/plexus-ae" LOG_EVERY=${LOG_EVERY:-10} \
  tools/train-family.sh "$data" "$train_seconds" > "$out/family-summary.txt" 2>&1 || status=$?
cat "$out/family-summary.txt"
: > "$out/train-logs.txt"
for run in "$runs"/lambda-*; do
  { echo "== $run"; grep -v "^\s*$" "$run/train.log" | tail -8; tail -3 "$run/metrics.jsonl"; } >> "$out/train-logs.txt" || true
done
grep -E "parameters|reached|rror" "$out/train-logs.txt" || true
echo "total $((SECONDS - start)) s"
exit "$status"
