#!/usr/bin/env bash
# Fine-tunes the dense bls2017 model with its decoder pruned to 50%, 80% and
# 90% sparsity, and a dense control with the same settings and no pruning,
# as four concurrent plexus-ae processes on one machine (one GPU: they share
# it and the cores), each stopped by --time-limit; then prints each run's
# steps, decoder sparsity and checkpoint.
#
# usage: train-pruned.sh DATA SECONDS OUTDIR
#   DATA     a folder of training photos (e.g. the 400 BSDS500 training images)
#   SECONDS  training time of each run (--time-limit)
#   OUTDIR   runs go to OUTDIR/dense, OUTDIR/sparsity-50, -80, -90
# env (defaults in brackets):
#   PLEXUS_AE, SPARSE_CONV_PLUGIN  the app and the plugin [built by tools/build-plugin.sh into OUTDIR/build]
#   INIT_FROM     the dense model to start from [models/trained/bls2017/model.safetensors, lambda 0.01]
#   LAMBDA [0.01] BATCH [16] PATCH [256] STEPS [1000000: the time limit ends the runs]
#   LR [1e-5]: fresh Adam moments make the first updates full-size (lr per weight), which at
#     the model's training rate of 1e-4 costs the dense model 2.5 dB on a Kodak image in 20 steps;
#     1e-5 costs 0.08 dB
#   PRUNE_START [200] PRUNE_END [3000] PRUNE_EVERY [100]  the pruning schedule, in updates
#   DEVICE [auto] THREADS [3: decoding threads per run] CPU_THREADS [0: every core, per run]
#   SPARSITIES ["0.5 0.8 0.9"]
set -euo pipefail
[[ $# -eq 3 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2; }
data=$1
seconds=$2
out=$(mkdir -p "$3" && cd "$3" && pwd)
plugin_dir=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$plugin_dir/../../.." && pwd)

if [[ -z ${PLEXUS_AE:-} || -z ${SPARSE_CONV_PLUGIN:-} ]]; then
  eval "$("$plugin_dir/tools/build-plugin.sh" "$out/build")"
fi
init_from=${INIT_FROM:-$repo/models/trained/bls2017/model.safetensors}
common=(--data "$data" --lambda "${LAMBDA:-0.01}" --batch "${BATCH:-16}" --patch "${PATCH:-256}"
        --lr "${LR:-1e-5}" --lr-schedule none --steps "${STEPS:-1000000}" --time-limit "$seconds"
        --device "${DEVICE:-auto}" --threads "${THREADS:-3}" --cpu-threads "${CPU_THREADS:-0}"
        --log-every 100 --checkpoint-every 1000 --init-from "$init_from")

# One spec per sparsity: the bundled one with the sparsity and schedule replaced.
spec_for() {
  python3 - "$plugin_dir/models/bls2017-pruned-decoder.json" "$1" "${PRUNE_START:-200}" "${PRUNE_END:-3000}" \
    "${PRUNE_EVERY:-100}" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
for node in spec["nodes"]:
    if node["type"] == "PrunedConvTranspose2d":
        node["params"].update(sparsity=float(sys.argv[2]), start_step=int(sys.argv[3]),
                              end_step=int(sys.argv[4]), prune_every=int(sys.argv[5]))
spec["name"] += "-%d" % round(100 * float(sys.argv[2]))
print(json.dumps(spec, indent=1))
PY
}

runs=(dense)
pids=()
"$PLEXUS_AE" train --model bls2017 --out "$out/dense" "${common[@]}" > "$out/dense.log" 2>&1 &
pids+=($!)
for sparsity in ${SPARSITIES:-0.5 0.8 0.9}; do
  name=sparsity-$(python3 -c "print(round(100 * $sparsity))")
  spec_for "$sparsity" > "$out/$name.json"
  "$PLEXUS_AE" train --plugin "$SPARSE_CONV_PLUGIN" --model "$out/$name.json" --out "$out/$name" "${common[@]}" \
    > "$out/$name.log" 2>&1 &
  pids+=($!)
  runs+=("$name")
done

failed=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "run ${runs[$i]} failed; the end of $out/${runs[$i]}.log:" >&2
    tail -20 "$out/${runs[$i]}.log" >&2
    failed=1
  fi
done

echo
printf "%-12s %8s %18s  %s\n" run steps "decoder sparsity" "model (checkpoint.safetensors beside it)"
for name in "${runs[@]}"; do
  model=$out/$name/model.safetensors
  [[ -f $model ]] || { printf "%-12s %8s %18s  %s\n" "$name" - - "(no model)"; continue; }
  python3 "$plugin_dir/tools/decoder_sparsity.py" "$model" --row "$name"
done
exit $failed
