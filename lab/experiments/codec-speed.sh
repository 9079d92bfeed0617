#!/usr/bin/env bash
# Encode and decode times of the hyperprior codecs on one GPU: each bundled
# model trained briefly (TRAIN_SECONDS, default 90: enough for latents and
# rates of the right order; the times hardly depend on the weights), then
# `plexus-ae eval --device cuda` over the given images, which compresses and
# decompresses each one in memory and prints the times (the first image
# includes the warm-up). On a machine with an NVIDIA GPU:
#
#   lab/experiments/codec-speed.sh KODAK_DIR
#
#   KODAK_DIR  the 24 Kodak PhotoCD images at full size, 768x512 (r0k.us/graphics/kodak)
#
# Environment: MODELS (default "minnen2020-channel mbt2018-mean"),
# PLEXUS_AE (a built plexus-ae, default build-gpu/bin/plexus-ae), RUNS
# (default runs/codec-speed), OUT (default codec-speed-out).
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 KODAK_DIR" >&2
  exit 2
fi
kodak=$(realpath "$1")
cd "$(dirname "$0")/../.."
ae=${PLEXUS_AE:-build-gpu/bin/plexus-ae}
runs=$(realpath -m "${RUNS:-runs/codec-speed}")
out=$(realpath -m "${OUT:-codec-speed-out}")
mkdir -p "$runs" "$out"
nvidia-smi --query-gpu=name --format=csv,noheader > "$out/gpu.txt"
read -r -a models <<< "${MODELS:-minnen2020-channel mbt2018-mean}"
for model in "${models[@]}"; do
  "$ae" train --data data/train-sample --model "$model" --lambda 0.0067 --batch 8 --patch 256 --lr 1e-4 \
    --lr-schedule final --steps 10000000 --time-limit "${TRAIN_SECONDS:-90}" --device cuda --seed 1 \
    --out "$runs/$model" > "$runs/$model-train.log" 2>&1
  "$ae" eval --model "$runs/$model/model.safetensors" --data "$kodak" --device cuda --precision f32 \
    > "$out/$model-cuda.txt" 2> "$out/$model-cuda.log"
  # The median over the images after the first (the warm-up).
  python3 - "$out/$model-cuda.txt" "$model" <<'PY' | tee -a "$out/summary.txt"
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.startswith("kodim")]
enc = [float(r[-2]) for r in rows[1:]]
dec = [float(r[-1]) for r in rows[1:]]
print(f"{sys.argv[2]}: {len(rows)} images, encode median {statistics.median(enc):.1f} ms "
      f"(min {min(enc):.1f}), decode median {statistics.median(dec):.1f} ms (min {min(dec):.1f}); "
      f"first image {rows[0][-2]} / {rows[0][-1]} ms")
PY
done
