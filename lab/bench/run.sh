#!/usr/bin/env bash
# On the GPU machine, from the repository root, after a build in build-gpu/
# (tools/gpu-check.sh makes one):
#   bash lab/bench/run.sh [--precision f32|tf32|bf16] [--only TEXT] [--models] [--no-compile] [--rounds N]
#   bash lab/bench/run.sh --precision tf32,bf16 --only Conv --no-compile --rounds 3
#   bash lab/bench/run.sh --precision bf16 --models --rounds 3
# Runs plexus-bench and the PyTorch reference (eager, plus torch.compile for
# the training steps unless --no-compile) back to back on the same GPU at the
# same precision and prints one table (lab/bench/compare.py). --only keeps
# the cases whose name contains TEXT (e.g. --only Conv: the convolution rows).
# --models times only the training steps of every model in bench_cases.json
# (PyTorch: eager, torch.compile, torch.compile with bf16, and the strongest
# setting, the whole step as one CUDA graph (torch_strongest.py), plus
# CompressAI's own models where installed), not the layers. The headline
# table of docs/performance.md has a command of its own: lab/bench/headline.sh.
# Raw JSON lines and the table go to $OUT (default bench-logs/).
# --rounds N (default 1) measures both sides N times, alternating which goes
# first, and the tables show each time's median over the rounds: a GPU's
# clocks drift between runs minutes apart, and one pass of each side can
# differ by a few percent for that reason alone.
# With several precisions (comma-separated) each runs in turn into
# $OUT/<precision>/, and the convolution rows of all of them are printed side
# by side (lab/bench/compare.py --precisions) into $OUT/precisions.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-bench-logs}  # made by run_one, so refused options leave no folder behind
build=${BUILD:-build-gpu}
cases=${CASES:-lab/bench/bench_cases.json}  # another cases file, e.g. a subset of the models
python=${PYTHON:-python3}
common=() torch_only=() precisions=f32 rounds=1
while [ $# -gt 0 ]; do
  case "$1" in
    --precision) precisions=$2; shift 2 ;;
    --rounds)
      rounds=$2; shift 2
      # Digits only, and not all zeros ("00" would run nothing and print an empty table).
      if ! [[ $rounds =~ ^[0-9]+$ ]] || ((10#$rounds < 1)); then
        echo "run.sh: --rounds must be a whole number >= 1, got '$rounds'" >&2
        exit 2
      fi
      rounds=$((10#$rounds)) ;;  # "08" is 8, not a bad octal number
    --only) common+=("$1" "$2"); shift 2 ;;
    --models) common+=("$1"); shift ;;
    --tf32) precisions=tf32; shift ;;  # deprecated alias
    --no-compile) torch_only+=("$1"); shift ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
# ${a[@]+"${a[@]}"}: an empty array expands to nothing, also under set -u in older bash.
plexus_side() {
  "$build/bin/plexus-bench" --cases "$cases" --precision "$1" \
    ${common[@]+"${common[@]}"} | tee -a "$2/plexus.jsonl"
}
torch_side() {
  "$python" lab/bench/torch_bench.py --cases "$cases" --precision "$1" \
    ${common[@]+"${common[@]}"} ${torch_only[@]+"${torch_only[@]}"} | tee -a "$2/torch.jsonl"
}
# One precision: the rounds of plexus-bench and PyTorch (odd rounds Plexus
# first, even rounds PyTorch first), then the joined table, into folder $2.
run_one() {
  local precision=$1 folder=$2 round
  mkdir -p "$folder"
  : >"$folder/plexus.jsonl"
  : >"$folder/torch.jsonl"
  for ((round = 1; round <= rounds; round++)); do
    [ "$rounds" -gt 1 ] && echo "== $precision: round $round of $rounds" >&2
    if ((round % 2)); then
      plexus_side "$precision" "$folder"
      torch_side "$precision" "$folder"
    else
      torch_side "$precision" "$folder"
      plexus_side "$precision" "$folder"
    fi
  done
  "$python" lab/bench/compare.py "$folder/plexus.jsonl" "$folder/torch.jsonl" | tee "$folder/table.md"
}
if [ "${precisions#*,}" = "$precisions" ]; then
  run_one "$precisions" "$out"
else
  folders=()
  for precision in ${precisions//,/ }; do
    run_one "$precision" "$out/$precision"
    folders+=("$out/$precision")
  done
  "$python" lab/bench/compare.py --precisions "${folders[@]}" | tee "$out/precisions.md"
fi
