#!/usr/bin/env bash
# Does training with BF16 products cost rate-distortion quality against TF32?
# Trains bmshj2018-factorized (or MODEL) three times at the same time on one GPU, same
# data and settings but for precision and seed:
#   tf32-seed1  --precision tf32 --seed 1
#   bf16-seed1  --precision bf16 --seed 1
#   tf32-seed2  --precision tf32 --seed 2  (the seed-to-seed spread: the yardstick)
# then evaluates each final model on the Kodak images with `plexus-ae eval
# --precision f32` (so only the training differs) and compares the
# rate-distortion cost the trainer minimises, J = bpp + lambda * 255^2 * MSE
# (MSE on [0, 1] values; the mean bpp and the mean per-image MSE over Kodak).
#
# The rule: BF16 costs "no measurable quality" when
#   |J_bf16 - J_tf32|  <=  |J_tf32,seed2 - J_tf32,seed1|
# (the BF16 difference at the same seed is no larger than what another TF32
# seed does). The output also gives the plain deltas (bpp in %, PSNR in dB)
# and the image-by-image comparison (lab/experiments/precision_quality.py).
#
# On a machine with an NVIDIA GPU, from anywhere:
#
#   lab/experiments/precision-quality.sh BSDS500_TRAIN_DIR KODAK_DIR
#
#   BSDS500_TRAIN_DIR  the 400 training photos of BSDS500, the Berkeley
#                      segmentation data set (BSR/BSDS500/data/images/train)
#   KODAK_DIR          the 24 Kodak PhotoCD images (r0k.us/graphics/kodak)
#
# Environment (defaults in brackets):
#   STEPS       training steps of every run [13000: side by side on an H100
#               80GB HBM3 the TF32 runs trained for 284 s, the BF16 run for
#               260 s; at that rate about 18000 would take 7 minutes]
#   TIME_LIMIT  safety net, seconds of training per run (--time-limit) [420];
#               a run that stops on it did fewer steps than STEPS, and the
#               verdict then says the comparison is not at equal steps
#   BUDGET_SECONDS  wall-clock budget of this whole script (build, training,
#               evaluation); when set, the training time limit shrinks to fit
#               it, keeping EVAL_SECONDS [60] for the evaluations [none]
#   MODEL [bmshj2018-factorized]  LAMBDA [0.01, the trainer's default]
#   BATCH [16]  PATCH [256]  LR [1e-4]
#   LR_DECAY    the learning rate is multiplied by it for the last 10% of
#               the steps [0.1]; by steps, not time, so that the three runs,
#               which progress at different speeds, decay at the same step
#   LOG_EVERY   steps per metrics line [100]
#   CORES       cores shared by the three processes [nproc]
#   DEVICE      [cuda]; `cpu` runs the same steps in f32 (the CPU has no
#               TF32 or BF16): a smoke test of this script with tiny
#               settings, e.g. DEVICE=cpu CMAKE_ARGS=-DPLEXUS_CUDA=OFF STEPS=20
#               PATCH=64 BATCH=2, not an experiment
#   BUILD       build folder [build-gpu]; CMAKE_ARGS, more CMake settings
#               (e.g. CMAKE_ARGS=-DCMAKE_CUDA_ARCHITECTURES=86)
#   RUNS        folder of the three runs [runs/precision-quality]
#   OUT         results [precision-quality-out]: summary.json, table.md,
#               verdict.txt, gpu.txt, build.log, logs.tar.gz (each run's
#               train.log, metrics.jsonl, Kodak eval.json and eval output)
#   (relative paths in BUILD, RUNS and OUT are relative to the repository root)
# A run folder that already holds a model or checkpoint is never replaced:
# the script stops and names it (remove it, or pick another RUNS).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BSDS500_TRAIN_DIR KODAK_DIR" >&2
  exit 2
fi
script_start=$SECONDS
[ -d "$1" ] || { echo "$0: training folder '$1' does not exist" >&2; exit 2; }
[ -d "$2" ] || { echo "$0: Kodak folder '$2' does not exist" >&2; exit 2; }
train_dir=$(realpath "$1")
kodak_dir=$(realpath "$2")
cd "$(dirname "$0")/../.."
root=$(pwd)

steps=${STEPS:-13000}
time_limit=${TIME_LIMIT:-420}
lambda=${LAMBDA:-0.01}
model=${MODEL:-bmshj2018-factorized}
out=${OUT:-precision-quality-out}
runs=${RUNS:-runs/precision-quality}
build=${BUILD:-build-gpu}
cores=${CORES:-$(nproc)}
for setting in "STEPS=$steps" "TIME_LIMIT=$time_limit" "CORES=$cores" "BUDGET_SECONDS=${BUDGET_SECONDS:-0}" \
  "EVAL_SECONDS=${EVAL_SECONDS:-60}"; do
  case ${setting#*=} in '' | *[!0-9]*) echo "$0: ${setting%%=*} must be a whole number, got '${setting#*=}'" >&2; exit 2 ;; esac
done
names=(tf32-seed1 bf16-seed1 tf32-seed2)
precisions=(tf32 bf16 tf32)
seeds=(1 1 2)
for name in "${names[@]}"; do
  for file in model.safetensors checkpoint.safetensors; do
    if [ -e "$runs/$name/$file" ]; then
      echo "$0: $runs/$name/$file exists (an earlier run); remove $runs/$name or set RUNS to another folder" >&2
      exit 2
    fi
  done
done
mkdir -p "$out" "$runs"

echo "== build plexus-ae ($build)"
# shellcheck disable=SC2086
if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLEXUS_BUILD_TESTS=OFF \
         -DCMAKE_CUDA_ARCHITECTURES=native ${CMAKE_ARGS:-} &&
       cmake --build "$build" --target plexus-ae -j "$(nproc)"; } > "$out/build.log" 2>&1; then
  tail -40 "$out/build.log" >&2
  echo "$0: the build failed (log: $out/build.log)" >&2
  exit 1
fi
case $build in /*) plexus_ae=$build/bin/plexus-ae ;; *) plexus_ae=$root/$build/bin/plexus-ae ;; esac
device=${DEVICE:-cuda}
if [ "$device" = cuda ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
else
  echo "device $device: no TF32 or BF16, a smoke test of the script only" | tee "$out/gpu.txt"
fi

if [ "${BUDGET_SECONDS:-0}" -gt 0 ]; then
  # What is left of the budget after the build, less the evaluations and the
  # trainers' start-up and final save.
  left=$(( BUDGET_SECONDS - (SECONDS - script_start) - ${EVAL_SECONDS:-60} - 20 ))
  [ "$left" -ge "$time_limit" ] || time_limit=$left
  [ "$time_limit" -ge 30 ] || { echo "$0: BUDGET_SECONDS leaves $time_limit s of training" >&2; exit 1; }
fi
# One decay of the learning rate, at 90% of the steps (the next would be at 180%).
decay_step=$(( steps * 9 / 10 ))
[ "$decay_step" -ge 1 ] || decay_step=1
# Each process: its training thread plus decoding threads, about one per core in all.
threads=$(( cores / ${#names[@]} - 1 ))
[ "$threads" -ge 1 ] || threads=1

echo "== train ${#names[@]} runs of $model at the same time: $steps steps each, time limit $time_limit s, lambda $lambda"
pids=()
for i in "${!names[@]}"; do
  run=$runs/${names[$i]}
  mkdir -p "$run"
  # The trainer's --time-limit ends the run itself (model saved); timeout is
  # the last resort if a process hangs: SIGTERM saves a checkpoint.
  timeout --kill-after=30 $(( time_limit + 60 )) \
    "$plexus_ae" train --data "$train_dir" --model "$model" --lambda "$lambda" \
      --batch "${BATCH:-16}" --patch "${PATCH:-256}" --lr "${LR:-1e-4}" --steps "$steps" --time-limit "$time_limit" \
      --lr-schedule step --lr-step-every "$decay_step" --lr-decay "${LR_DECAY:-0.1}" \
      --precision "${precisions[$i]}" --seed "${seeds[$i]}" --device "$device" --threads "$threads" --cpu-threads 1 \
      --log-every "${LOG_EVERY:-100}" --checkpoint-every 0 --out "$run" > "$run/train.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!names[@]}"; do
  run=$runs/${names[$i]}
  if ! wait "${pids[$i]}"; then
    echo "${names[$i]}: plexus-ae train failed or was stopped; the end of $run/train.log:" >&2
    tail -5 "$run/train.log" >&2
    failed=1
  fi
  if grep -q -- "--time-limit of" "$run/train.log"; then
    echo "${names[$i]}: stopped on the time limit, not after $steps steps: $(grep -- "--time-limit of" "$run/train.log")"
  fi
  echo "${names[$i]}: $(grep "^trained" "$run/train.log" || tail -1 "$run/train.log")"
done

echo "== evaluate on $kodak_dir at f32 ($device)"
pids=()
for name in "${names[@]}"; do
  run=$runs/$name
  trained=$run/model.safetensors
  [ -f "$trained" ] || trained=$run/checkpoint.safetensors  # stopped by a signal: its last checkpoint
  "$plexus_ae" eval --model "$trained" --data "$kodak_dir" --device "$device" --precision f32 --out "$run/kodak" \
    > "$run/kodak-eval.txt" 2> "$run/eval.log" &
  pids+=($!)
done
for i in "${!names[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "${names[$i]}: plexus-ae eval failed: $(tail -1 "$runs/${names[$i]}/eval.log")" >&2
    failed=1
  fi
done

# The logs, small, in one file (reconstructions and models stay in $runs).
files=()
for name in "${names[@]}"; do
  for file in train.log metrics.jsonl kodak/eval.json kodak-eval.txt eval.log; do
    [ ! -f "$runs/$name/$file" ] || files+=("$name/$file")
  done
done
cp "$out/build.log" "$runs/build.log"
tar -C "$runs" -czf "$out/logs.tar.gz" build.log "${files[@]}"

echo "== summary"
python3 lab/experiments/precision_quality.py --lambda "$lambda" --steps "$steps" --tf32 "$runs/tf32-seed1" \
  --bf16 "$runs/bf16-seed1" --tf32-seed2 "$runs/tf32-seed2" --out "$out" | tee "$out/verdict.txt"
echo "results in $out; runs (models, reconstructions) in $runs; $(( SECONDS - script_start )) s in all"
exit "$failed"
