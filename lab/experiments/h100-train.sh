#!/usr/bin/env bash
# The training run of docs/results.md: bls2017 at lambda 0.01 on the BSDS500
# training photos for a fixed wall-clock budget, then evaluation on Kodak.
# On a machine with an NVIDIA GPU, from anywhere:
#
#   lab/experiments/h100-train.sh BSDS500_TRAIN_DIR KODAK_DIR
#
#   BSDS500_TRAIN_DIR  the 400 training photos of BSDS500, the Berkeley
#                      segmentation data set (BSR/BSDS500/data/images/train)
#   KODAK_DIR          the 24 Kodak PhotoCD images (r0k.us/graphics/kodak);
#                      docs/results.md used 500x500 centre crops of them
#
# Environment: TRAIN_SECONDS (default 390), BATCH (8), PATCH (256), LR (1e-4),
# OUT (log folder, default h100-train-out), and any CMake cache setting in
# CMAKE_ARGS (e.g. CMAKE_ARGS=-DCMAKE_CUDA_ARCHITECTURES=86).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BSDS500_TRAIN_DIR KODAK_DIR" >&2
  exit 2
fi
train_dir=$(realpath "$1")
kodak_dir=$(realpath "$2")
cd "$(dirname "$0")/../.."
out=${OUT:-h100-train-out}
mkdir -p "$out"
build=build-gpu
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLEXUS_BUILD_TESTS=OFF ${CMAKE_ARGS:-} \
  > "$out/configure.log"
cmake --build "$build" --target plexus-ae -j "$(nproc)" > "$out/build.log"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"

run=runs/h100-bls2017
rm -rf "$run"
set -x
"$build/bin/plexus-ae" train --data "$train_dir" --model bls2017 --lambda 0.01 \
  --batch "${BATCH:-8}" --patch "${PATCH:-256}" --lr "${LR:-1e-4}" --steps 1000000 \
  --time-limit "${TRAIN_SECONDS:-390}" --threads 12 --seed 1 --device cuda \
  --log-every 50 --checkpoint-every 2000 --out "$run" 2> "$out/train.log"
"$build/bin/plexus-ae" eval --model "$run/model.safetensors" --data "$kodak_dir" --device cuda \
  --out "$out/kodak-reconstructions" > "$out/kodak-eval.txt" 2> "$out/eval.log"
set +x
cp "$run/metrics.jsonl" "$run/model.safetensors" "$out/"
tail -5 "$out/train.log"
cat "$out/kodak-eval.txt"
