#!/usr/bin/env bash
# Trains the shipped variable-rate model, mbt2018-mean-vr (compress
# --quality 1 to 6, one model file), on every GPU of this machine
# (data-parallel, --gpus), then exports it with int8 weights and its integer
# network calibrated on a few training photos. On a machine with NVIDIA
# GPUs, after building plexus-ae:
#
#   tools/train-variable-rate.sh BSDS500_TRAIN_DIR SECONDS
#
#   BSDS500_TRAIN_DIR  the 400 training photos of BSDS500, the Berkeley
#                      segmentation data set (BSR/BSDS500/data/images/train)
#   SECONDS            training time (--time-limit)
#
# Environment (defaults in brackets):
#   LAMBDAS     one per rate level, increasing [0.0018,0.0035,0.0067,0.013,0.025,0.0483:
#               CompressAI's qualities 1-6]
#   GPUS        data-parallel GPUs [every GPU nvidia-smi lists]
#   BATCH, PATCH, LR   per-GPU patches per step, patch side, Adam's rate [8, 256, 1e-4]
#   OUT         the run's folder [runs/mbt2018-mean-vr]
#   MODEL_OUT   the exported model [models/trained/mbt2018-mean-vr/model.safetensors]
#   STORAGE     int8, f16 or f32 [int8]
#   CALIBRATION_COUNT  training photos the integer network is calibrated on [48]
#   PLEXUS_AE   the executable [build/bin/plexus-ae]
#   EXTRA_ARGS  more `plexus-ae train` options
# The learning rate drops tenfold for the last 10% of SECONDS. A run whose
# folder holds a checkpoint is resumed (--resume). Log: OUT/train.log.
set -euo pipefail
# shellcheck source=tools/training-arguments.sh
. "$(dirname "$0")/training-arguments.sh"
training_arguments "$0" "$@"
gpus=${GPUS:-$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)}
out=${OUT:-runs/mbt2018-mean-vr}
model_out=${MODEL_OUT:-$root/models/trained/mbt2018-mean-vr/model.safetensors}
threads=$(( $(nproc) / (gpus > 0 ? gpus : 1) - 2 ))
[ "$threads" -ge 1 ] || threads=1
mkdir -p "$out"
resume=()
[ -f "$out/checkpoint.safetensors" ] && resume=(--resume)
parallel=()
[ "$gpus" -gt 1 ] && parallel=(--gpus "$gpus")
# shellcheck disable=SC2086
"$plexus_ae" train --data "$data" --model mbt2018-mean-vr \
  --lambdas "${LAMBDAS:-0.0018,0.0035,0.0067,0.013,0.025,0.0483}" \
  --batch "${BATCH:-8}" --patch "${PATCH:-256}" --lr "${LR:-1e-4}" --lr-schedule final --lr-decay 0.1 \
  --steps 100000000 --time-limit "$seconds" --threads "$threads" --device cuda --log-every 1000 \
  --checkpoint-every 10000 --out "$out" "${parallel[@]}" "${resume[@]}" ${EXTRA_ARGS:-} > "$out/train.log" 2>&1
calibration="$out/calibration"
rm -rf "$calibration" && mkdir -p "$calibration"
find "$data" -maxdepth 1 -type f \( -iname '*.jpg' -o -iname '*.png' \) | sort | head -n "${CALIBRATION_COUNT:-48}" |
  while read -r image; do ln -s "$(realpath "$image")" "$calibration/"; done
mkdir -p "$(dirname "$model_out")"
"$plexus_ae" export --model "$out/model.safetensors" --calibration-images "$calibration" \
  --storage "${STORAGE:-int8}" --out "$model_out"
tail -n 3 "$out/train.log"
