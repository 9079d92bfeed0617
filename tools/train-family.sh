#!/usr/bin/env bash
# Trains a family of bmshj2018-hyperprior models, one per lambda, at the same
# time on one GPU: each an independent `plexus-ae train` process with its own
# output folder, for a wall-clock budget. Then writes each final model with
# f16 weights (model-f16.safetensors, for shipping) and prints one summary
# line per model. On a machine with an NVIDIA GPU, after building plexus-ae:
#
#   tools/train-family.sh BSDS500_TRAIN_DIR SECONDS
#
#   BSDS500_TRAIN_DIR  the 400 training photos of BSDS500, the Berkeley
#                      segmentation data set (BSR/BSDS500/data/images/train)
#   SECONDS            the training time of every process (--time-limit)
#
# Environment (defaults in brackets):
#   LAMBDAS     the lambdas ["0.0035 0.0067 0.013 0.025", CompressAI's qualities 2-5]
#   OUT         folder of the runs, one lambda-<L>/ each [runs/hyperprior-family]
#   VAL         folder of validation images (e.g. the Kodak PhotoCD set,
#               r0k.us/graphics/kodak), scored at the end of each run [none]
#   CALIBRATION folder of a few photos (say 20 of the training set) on which
#               export calibrates each model's integer network [none:
#               samples of the hyper-latent's prior]
#   BATCH, PATCH, LR   [16, 256, 1e-4]
#   LR_SCHEDULE [final: the learning rate drops by LR_DECAY (0.1) for the last
#               10% of the time; give `none` for a run to be resumed later]
#   PRECISION   [tf32]    DEVICE [cuda]    CORES [nproc, shared by the processes]
#   LOG_EVERY   steps per metrics line [100]
#   PLEXUS_AE   the executable [build/bin/plexus-ae]
#   EXTRA_ARGS  more `plexus-ae train` options for every process
# A run whose folder holds a checkpoint is resumed (--resume): call again to
# train longer. Logs: OUT/lambda-<L>/train.log; metrics: metrics.jsonl.
set -euo pipefail
# shellcheck source=tools/training-arguments.sh
. "$(dirname "$0")/training-arguments.sh"
training_arguments "$0" "$@"
read -r -a lambdas <<< "${LAMBDAS:-0.0035 0.0067 0.013 0.025}"
out=${OUT:-runs/hyperprior-family}
cores=${CORES:-$(nproc)}
# Each process: its training thread plus decoding threads, all processes
# together about one per core.
threads=$(( cores / ${#lambdas[@]} - 1 ))
[ "$threads" -ge 1 ] || threads=1
val_args=()
[ -z "${VAL:-}" ] || val_args=(--val "$VAL" --val-every 100000000)
calibration_args=()
[ -z "${CALIBRATION:-}" ] || calibration_args=(--calibration-images "$CALIBRATION")

mkdir -p "$out"
pids=()
for lambda in "${lambdas[@]}"; do
  run="$out/lambda-$lambda"
  mkdir -p "$run"
  resume=()
  [ ! -f "$run/checkpoint.safetensors" ] || resume=(--resume)
  # shellcheck disable=SC2086
  "$plexus_ae" train --data "$data" --model bmshj2018-hyperprior --lambda "$lambda" \
    --batch "${BATCH:-16}" --patch "${PATCH:-256}" --lr "${LR:-1e-4}" --steps 100000000 \
    --time-limit "$seconds" --lr-schedule "${LR_SCHEDULE:-final}" --lr-decay "${LR_DECAY:-0.1}" \
    --precision "${PRECISION:-tf32}" --device "${DEVICE:-cuda}" --threads "$threads" --cpu-threads 1 \
    --log-every "${LOG_EVERY:-100}" --checkpoint-every 5000 "${val_args[@]}" "${resume[@]}" ${EXTRA_ARGS:-} \
    --out "$run" >> "$run/train.log" 2>&1 &
  pids+=($!)
done
echo "training ${#lambdas[@]} models for ${seconds} s each, ${threads} decoding thread(s) each, in $out"

failed=0
for i in "${!lambdas[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "lambda ${lambdas[$i]}: plexus-ae train failed; the end of $out/lambda-${lambdas[$i]}/train.log:" >&2
    tail -5 "$out/lambda-${lambdas[$i]}/train.log" >&2
    failed=1
  fi
done

for lambda in "${lambdas[@]}"; do
  run="$out/lambda-$lambda"
  [ -f "$run/model.safetensors" ] || continue
  if ! "$plexus_ae" export --model "$run/model.safetensors" --out "$run/model-f16.safetensors" --storage f16 \
      "${calibration_args[@]}" > "$run/export.log" 2>&1; then
    echo "lambda $lambda: export to f16 failed: $(tail -1 "$run/export.log")" >&2
    failed=1
  fi
  # One line from the metrics: steps, the last window's loss, bpp and PSNR,
  # the mean img/s after the first window (which includes start-up), the
  # validation result when there is one.
  python3 - "$lambda" "$run" <<'EOF'
import json, os, sys
lam, run = sys.argv[1], sys.argv[2]
train, val = [], []
for line in open(os.path.join(run, "metrics.jsonl")):
    entry = json.loads(line)
    (train if entry["kind"] == "train" else val if entry["kind"] == "val" else []).append(entry)
if not train:
    sys.exit(f"lambda {lam}: no training steps logged in {run}/metrics.jsonl")
last = train[-1]
steady = [e["images_per_second"] for e in train[1:]] or [last["images_per_second"]]
line = (f"lambda {lam}: {last['step']} steps, loss {last['loss']:.4f}, train {last['bpp']:.4f} bpp "
        f"{last['psnr']:.2f} dB, {sum(steady) / len(steady):.1f} img/s")
if val:
    line += f"; validation {val[-1]['bpp']:.4f} bpp {val[-1]['psnr']:.2f} dB"
f16 = os.path.join(run, "model-f16.safetensors")
if os.path.exists(f16):
    line += f"; {f16} ({os.path.getsize(f16) / 1e6:.1f} MB)"
print(line)
EOF
done
exit "$failed"
