#!/usr/bin/env bash
# The H100 training run of docs/results.md (issue 4): bls2017 at lambda 0.01
# on BSDS500-train for a fixed wall-clock budget, then eval on Kodak, in one
# device call. Run from the repository root on the GPU machine with the data
# carried in .device/ (see docs/results.md for the exact device command):
#   .device/bsds500-train/  (copy of shared/data/bsds500-train; training only)
#   .device/kodak/          (copy of shared/data/kodak; evaluation only)
# Environment: TRAIN_SECONDS (default 390), BATCH (8), PATCH (256), LR (1e-4).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-h100-train-out}
mkdir -p "$out"
build=build-gpu
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DPLEXUS_BUILD_TESTS=OFF > "$out/configure.log"
cmake --build "$build" --target plexus-ae -j "$(nproc)" > "$out/build.log"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"

run=runs/h100-bls2017
rm -rf "$run"
set -x
"$build/bin/plexus-ae" train --data .device/bsds500-train --model bls2017 --lambda 0.01 \
  --batch "${BATCH:-8}" --patch "${PATCH:-256}" --lr "${LR:-1e-4}" --steps 1000000 \
  --time-limit "${TRAIN_SECONDS:-390}" --threads 12 --seed 1 --device cuda \
  --log-every 50 --checkpoint-every 2000 --out "$run" 2> "$out/train.log"
"$build/bin/plexus-ae" eval --model "$run/model.safetensors" --data .device/kodak --device cuda \
  --out "$out/kodak-reconstructions" > "$out/kodak-eval.txt" 2> "$out/eval.log"
set +x
cp "$run/metrics.jsonl" "$run/model.safetensors" "$out/"
# Keep three reconstructions for the doc; the rest would exceed what travels back.
find "$out/kodak-reconstructions" -name '*.png' | sort | tail -n +4 | xargs -r rm
tail -5 "$out/train.log"
cat "$out/kodak-eval.txt"
