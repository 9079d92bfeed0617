#!/usr/bin/env bash
# On the GPU machine, from the repository root, after a build in build-gpu/
# (tools/gpu-check.sh makes one):
#   bash tools/bench/run.sh [--tf32]
# Runs plexus-bench and the PyTorch eager reference back to back on the same
# GPU and prints one table (tools/bench/compare.py). Raw JSON lines go to $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-bench-logs}
mkdir -p "$out"
build=${BUILD:-build-gpu}
python=${PYTHON:-python3}
"$build/bin/plexus-bench" --cases tools/bench/bench_cases.json "$@" | tee "$out/plexus.jsonl"
"$python" tools/bench/torch_bench.py --cases tools/bench/bench_cases.json "$@" | tee "$out/torch.jsonl"
"$python" tools/bench/compare.py "$out/plexus.jsonl" "$out/torch.jsonl" | tee "$out/table.md"
