#!/usr/bin/env bash
# Evaluates the runs of train-pruned.sh on the Kodak PhotoCD set
# (r0k.us/graphics/kodak, the 24 images) and prints the table: decoder
# sparsity, PSNR, rate and the PSNR lost against the dense control that
# was fine-tuned for the same time. With SPARSE_DECODER=1 each pruned model
# is also evaluated with its decoder run by SparseConvTranspose2d (the row
# layout), which must give the same numbers.
#
# usage: eval-kodak.sh KODAK_DIR RUNS_DIR
# env:   PLEXUS_AE, SPARSE_CONV_PLUGIN  [built by tools/build-plugin.sh into RUNS_DIR/build]
#        DEVICE [cpu]  SPARSE_DECODER [0]
set -euo pipefail
[[ $# -eq 2 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2; }
kodak=$1
runs=$(cd "$2" && pwd)
plugin_dir=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z ${PLEXUS_AE:-} || -z ${SPARSE_CONV_PLUGIN:-} ]]; then
  eval "$("$plugin_dir/tools/build-plugin.sh" "$runs/build")"
fi

evaluate() {  # name model
  local out=$runs/kodak/$1
  mkdir -p "$out"
  "$PLEXUS_AE" eval --plugin "$SPARSE_CONV_PLUGIN" --model "$2" --data "$kodak" --device "${DEVICE:-cpu}" \
    --out "$out" > "$out/eval.log" 2>&1 || { tail -20 "$out/eval.log" >&2; return 1; }
}

names=()
for name in dense sparsity-50 sparsity-80 sparsity-90; do
  model=$runs/$name/model.safetensors
  [[ -f $model ]] || { echo "no $model: skipped" >&2; continue; }
  evaluate "$name" "$model"
  names+=("$name")
  if [[ ${SPARSE_DECODER:-0} == 1 && $name != dense ]]; then
    python3 "$plugin_dir/tools/to_sparse_decoder.py" "$model" "$runs/kodak/$name-sparse.safetensors"
    evaluate "$name-sparse" "$runs/kodak/$name-sparse.safetensors"
    names+=("$name-sparse")
  fi
done

SPARSITY_TOOL=$plugin_dir/tools/decoder_sparsity.py KODAK=$kodak python3 - "$runs" "${names[@]}" <<'PY'
import json, os, subprocess, sys
runs, names = sys.argv[1], sys.argv[2:]
rows = []
for name in names:
    result = json.load(open(os.path.join(runs, "kodak", name, "eval.json")))
    rows.append((name, result["mean_psnr"], result["mean_bpp"], len(result["images"])))
dense = {name: psnr for name, psnr, _, _ in rows}.get("dense")
print("| run | decoder sparsity | steps | Kodak PSNR (dB) | bpp (entropy model) | PSNR vs dense |")
print("|---|---|---|---|---|---|")
for name, psnr, bpp, count in rows:
    model = os.path.join(runs, name.replace("-sparse", ""), "model.safetensors")
    info = subprocess.run([sys.executable, os.environ["SPARSITY_TOOL"], model], capture_output=True, text=True).stdout
    # "step S, decoder sparsity X%"
    step = info.split(",")[0].replace("step", "").strip()
    sparsity = info.split("sparsity")[-1].strip()
    delta = "" if dense is None or name == "dense" else "%+.3f" % (psnr - dense)
    print(f"| {name} | {sparsity} | {step} | {psnr:.3f} | {bpp:.4f} | {delta} |")
print(f"\n{rows[0][3] if rows else 0} images of {os.environ.get('KODAK', 'the Kodak set')}")
PY
