#!/usr/bin/env bash
# On the GPU machine, from the repository root, after a build in build-gpu/
# (tools/gpu-check.sh makes one):
#   bash tools/bench/run.sh [--precision f32|tf32|bf16] [--only TEXT] [--no-compile]
# Runs plexus-bench and the PyTorch reference (eager, plus torch.compile for
# the training steps unless --no-compile) back to back on the same GPU at the
# same precision and prints one table (tools/bench/compare.py). --only keeps
# the cases whose name contains TEXT (e.g. --only Conv: the convolution rows).
# Raw JSON lines and the table go to $OUT (default bench-logs/).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-bench-logs}
mkdir -p "$out"
build=${BUILD:-build-gpu}
python=${PYTHON:-python3}
common=() torch_only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --precision|--only) common+=("$1" "$2"); shift 2 ;;
    --tf32) common+=(--precision tf32); shift ;;  # deprecated alias
    --no-compile) torch_only+=("$1"); shift ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
# ${a[@]+"${a[@]}"}: an empty array expands to nothing, also under set -u in older bash.
"$build/bin/plexus-bench" --cases tools/bench/bench_cases.json ${common[@]+"${common[@]}"} | tee "$out/plexus.jsonl"
"$python" tools/bench/torch_bench.py --cases tools/bench/bench_cases.json ${common[@]+"${common[@]}"} \
  ${torch_only[@]+"${torch_only[@]}"} \
  | tee "$out/torch.jsonl"
"$python" tools/bench/compare.py "$out/plexus.jsonl" "$out/torch.jsonl" | tee "$out/table.md"
