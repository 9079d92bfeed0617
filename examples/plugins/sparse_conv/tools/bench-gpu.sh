#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds Plexus, installs it, builds this
# plugin and its benchmark against the install, then times the sparse
# forward (row layout and COO) at 50/80/90/95% sparsity against Plexus's
# dense ConvTranspose2d (f32 and TF32) and PyTorch's (eager f32 and TF32,
# torch.compile f32) at bls2017's decoder shapes, batch 1 and 16, and prints
# the table (bench/table.py).
#
# usage: bench-gpu.sh OUTDIR      results: OUTDIR/plexus.jsonl, torch.jsonl, table.md
# env:   PLEXUS_BUILD (reuse a Plexus build), NO_TORCH=1, NO_COMPILE=1
set -euo pipefail
[[ $# -eq 1 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
plugin_dir=$(cd "$(dirname "$0")/.." && pwd)
start=$SECONDS
eval "$("$plugin_dir/tools/build-plugin.sh" "$out/build" -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-native})"
echo "built in $((SECONDS - start)) s"
"$out/build/plugin/sparse_conv_bench" "$SPARSE_CONV_PLUGIN" | tee "$out/plexus.jsonl"
results=("$out/plexus.jsonl")
if [[ ${NO_TORCH:-0} != 1 ]] && python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
  python3 "$plugin_dir/bench/bench_torch.py" ${NO_COMPILE:+--no-compile} | tee "$out/torch.jsonl"
  results+=("$out/torch.jsonl")
else
  echo "PyTorch with CUDA not available: its columns are left out"
fi
python3 "$plugin_dir/bench/table.py" "${results[@]}" | tee "$out/table.md"
echo "total $((SECONDS - start)) s"
