#!/usr/bin/env bash
# The README's first command: installs what is missing, builds plexus-ae,
# trains bls2017 briefly on the bundled sample (data/train-sample) and
# evaluates it on the bundled Kodak images (data/eval-sample), printing a
# PSNR and bpp table. Uses the GPU when there is one (--device auto).
#
# On a 2-core machine without a GPU the CPU-only build takes about 2.7
# minutes and the run itself about 3.5 (4.9 with the baseline instruction
# set), ending near 21.7 dB at 1.03 bpp (22.3 dB at 1.02 bpp with the
# baseline instruction set: the README's numbers, which
# tests/tools/quickstart_test.sh checks).
# 2500 steps on six images teach the model only the coarse structure of a
# photograph: expect a blurry reconstruction; real training takes 100k+
# steps on hundreds of images (see the README's "Training the autoencoder").
#
# The CUDA backend is built only when an NVIDIA GPU is visible (nvidia-smi
# -L lists one): on a machine with the CUDA toolkit but no GPU, compiling
# kernels for GPUs it does not have would take about half the build.
# Extra arguments go to the configure step after that choice, e.g.
# -DPLEXUS_CUDA=ON to build the CUDA backend anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
if gpus=$(nvidia-smi -L 2>/dev/null) && grep -q '^GPU ' <<< "$gpus"; then
  cuda=(-UPLEXUS_CUDA)  # CMake's default again (CUDA when nvcc is found), whatever an earlier run chose
else
  echo "quickstart: no NVIDIA GPU visible: building the CPU-only version (-DPLEXUS_CUDA=OFF)"
  cuda=(-DPLEXUS_CUDA=OFF)
fi
cmake -S . -B build -G Ninja "${cuda[@]}" "$@" > /dev/null
cmake --build build --target plexus-ae -j "$(nproc)"

out=runs/quickstart
rm -rf "$out"
start=$(date +%s)
# A constant learning rate: the default schedule (plateau) acts on
# validations, and the bundled Kodak images are kept for the evaluation.
build/bin/plexus-ae train --data data/train-sample --model bls2017 \
    --steps 2500 --batch 4 --patch 64 --lr 2e-4 --lr-schedule none --lambda 0.01 --seed 1 \
    --device auto --log-every 100 --checkpoint-every 500 --out "$out"
build/bin/plexus-ae eval --model "$out/model.safetensors" --data data/eval-sample \
    --device auto --out "$out/reconstructions"
echo "quickstart: trained and evaluated in $(( $(date +%s) - start )) s; reconstructions in $out/reconstructions/"
