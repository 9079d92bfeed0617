#!/usr/bin/env bash
# Equal-time comparison of the scale hyperprior (bmshj2018-hyperprior) and
# the mean-scale hyperprior (mbt2018-mean): each trained on one GPU for the
# same seconds at lambda 0.0067 on the BSDS500 training photos, then
# measured from real files on the 24 full-size Kodak images, with the files
# compressed on CUDA decoded on the CPU and on CUDA and compared.
# On a machine with two NVIDIA GPUs (one is enough: the runs then take turns):
#
#   lab/experiments/mean-scale-equal-time.sh BSDS500_TRAIN_DIR KODAK_DIR
#
#   BSDS500_TRAIN_DIR  the 400 training photos of BSDS500, the Berkeley
#                      segmentation data set (BSR/BSDS500/data/images/train)
#   KODAK_DIR          the 24 Kodak PhotoCD images at full size, 768x512
#                      (r0k.us/graphics/kodak)
#
# PHASE=train starts the two trainings in the background and returns;
# PHASE=evaluate waits for them and measures; PHASE=all (default) does both.
# Environment: MODELS (the bundled models compared, default
# "bmshj2018-hyperprior mbt2018-mean"; two train at once on two GPUs, more
# take turns on GPU 0), TRAIN_SECONDS (600), BATCH (8), PATCH (256), LR (1e-4),
# PLEXUS_AE (a built plexus-ae; default: build one in build-gpu),
# RUNS (run folders, default runs/equal-time), OUT (results, default
# equal-time-out).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BSDS500_TRAIN_DIR KODAK_DIR" >&2
  exit 2
fi
train_dir=$(realpath "$1")
kodak_dir=$(realpath "$2")
script=$(realpath "$0")
cd "$(dirname "$0")/../.."
phase=${PHASE:-all}
runs=$(realpath -m "${RUNS:-runs/equal-time}")
out=$(realpath -m "${OUT:-equal-time-out}")
mkdir -p "$runs" "$out"
if [ -z "${PLEXUS_AE:-}" ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLEXUS_BUILD_TESTS=OFF > "$out/configure.log"
  cmake --build build-gpu --target plexus-ae -j "$(nproc)" > "$out/build.log"
  PLEXUS_AE=$(realpath build-gpu/bin/plexus-ae)
fi
read -r -a models <<< "${MODELS:-bmshj2018-hyperprior mbt2018-mean}"
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)

train() {  # model gpu
  CUDA_VISIBLE_DEVICES=$2 "$PLEXUS_AE" train --data "$train_dir" --model "$1" --lambda 0.0067 \
    --batch "${BATCH:-8}" --patch "${PATCH:-256}" --lr "${LR:-1e-4}" --lr-schedule final --steps 10000000 \
    --time-limit "${TRAIN_SECONDS:-600}" --threads 16 --seed 1 --device cuda --log-every 500 \
    --checkpoint-every 5000 --out "$runs/$1" > "$runs/$1.log" 2>&1
  echo $? > "$runs/$1.exit"
}

if [ "$phase" = train-one ]; then
  train "$MODEL" "$GPU"
  exit 0
fi

if [ "$phase" = train ] || [ "$phase" = all ]; then
  nvidia-smi --query-gpu=name --format=csv,noheader > "$out/gpus.txt"
  rm -rf "${runs:?}"/*
  # setsid keeps the runs going after this script returns (PHASE=train).
  one() { echo "PHASE=train-one MODEL=$1 GPU=$2 PLEXUS_AE='$PLEXUS_AE' RUNS='$runs' OUT='$out' '$script' '$train_dir' '$kodak_dir'"; }
  if [ "$gpus" -ge 2 ] && [ "${#models[@]}" -eq 2 ]; then
    for k in 0 1; do setsid bash -c "$(one "${models[$k]}" "$k")" < /dev/null > /dev/null 2>&1 & done
  else
    sequence=""
    for model in "${models[@]}"; do sequence+="$(one "$model" 0); "; done
    setsid bash -c "$sequence" < /dev/null > /dev/null 2>&1 &
  fi
  echo "training ${models[*]} for ${TRAIN_SECONDS:-600} s each (logs in $runs)"
fi
[ "$phase" = train ] && exit 0

for model in "${models[@]}"; do
  while [ ! -f "$runs/$model.exit" ]; do sleep 5; done
  if [ "$(cat "$runs/$model.exit")" != 0 ]; then
    echo "training $model failed:" >&2
    tail -20 "$runs/$model.log" >&2
    exit 1
  fi
done

# 48 training photos calibrate each integer network (the whole set takes minutes, no better).
calibration=$runs/calibration
mkdir -p "$calibration"
mapfile -t photos < <(find "$train_dir" -maxdepth 1 -type f | sort)
cp "${photos[@]:0:48}" "$calibration/"
for model in "${models[@]}"; do
  m=$runs/$model/model.safetensors
  "$PLEXUS_AE" export --model "$m" --calibration-images "$calibration" > "$out/$model-export.txt"
  grep "^trained" "$runs/$model.log" > "$out/$model-train.txt"
  cp "$runs/$model/metrics.jsonl" "$out/$model-metrics.jsonl"
  # Real files on CUDA (eval compresses and decompresses every image), strict f32 like compress.
  "$PLEXUS_AE" eval --model "$m" --data "$kodak_dir" --device cuda --precision f32 > "$out/$model-kodak.txt" \
    2> "$out/$model-eval.log"
  # Cross-device: compressed on CUDA, decompressed on CUDA and on the CPU.
  rm -rf "$runs/$model-files" "$runs/$model-cuda" "$runs/$model-cpu"
  "$PLEXUS_AE" compress --model "$m" --device cuda "$kodak_dir"/*.png -o "$runs/$model-files/" > /dev/null
  "$PLEXUS_AE" decompress --model "$m" --device cuda "$runs/$model-files"/*.pxae -o "$runs/$model-cuda/" > /dev/null
  "$PLEXUS_AE" decompress --model "$m" --device cpu "$runs/$model-files"/*.pxae -o "$runs/$model-cpu/" > /dev/null
  python3 lab/experiments/compare_decodes.py "$kodak_dir" "$runs/$model-files" "$runs/$model-cuda" \
    "$runs/$model-cpu" > "$out/$model-cross-device.txt"
  "$PLEXUS_AE" export --model "$m" --storage f16 --out "$out/$model-f16.safetensors" > /dev/null
done
for model in "${models[@]}"; do
  echo "== $model: $(cat "$out/$model-train.txt")"
  tail -1 "$out/$model-kodak.txt"
  tail -1 "$out/$model-cross-device.txt"
done | tee "$out/summary.txt"
