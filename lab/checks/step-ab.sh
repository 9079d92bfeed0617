# shellcheck shell=bash
# Sourced by the lab's GPU scripts:
#   source lab/checks/step-ab.sh
#   step_ab LOGS BUILD ROUNDS VARIABLE [OFF_LABEL ON_LABEL]
# Times every bundled model's bf16 training step (plexus-bench --models, CUDA
# graph) with the environment variable VARIABLE=0 and =1, ROUNDS times,
# alternating which goes first, and prints the median images/s of each,
# their ratio and each side's peak memory. MODELS (plexus-bench --only
# texts separated by spaces, default: all models) narrows the run. Rows go
# to LOGS/steps-VARIABLE{0,1}-roundR.jsonl.
# Returns 1 when a benchmark run failed.
step_ab() {
  local logs=$1 build=$2 rounds=$3 variable=$4 off_label=${5:-off} on_label=${6:-on}
  local status=0 texts=() round setting text
  read -r -a texts <<< "${MODELS:-}"
  [ ${#texts[@]} -gt 0 ] || texts=("")
  for round in $(seq 1 "$rounds"); do
    local order=(0 1)
    [ $((round % 2)) -eq 0 ] && order=(1 0)
    for setting in "${order[@]}"; do
      : > "$logs/steps-$variable$setting-round$round.jsonl"
      for text in "${texts[@]}"; do
        env "$variable=$setting" "$build/bin/plexus-bench" --precision bf16 --models --only "$text" \
          >> "$logs/steps-$variable$setting-round$round.jsonl" 2>> "$logs/steps.err" || status=1
      done
    done
  done
  python3 - "$logs" "$rounds" "$variable" "$off_label" "$on_label" << 'PY'
import json, statistics, sys
logs, rounds, variable, off_label, on_label = sys.argv[1], int(sys.argv[2]), *sys.argv[3:6]
rates, peaks = {}, {}
for setting in (0, 1):
    for r in range(1, rounds + 1):
        for line in open(f"{logs}/steps-{variable}{setting}-round{r}.jsonl"):
            row = json.loads(line)
            if row.get("kind") == "train_step_graph":
                rates.setdefault(row["name"], {}).setdefault(setting, []).append(row["images_per_s"])
                peaks.setdefault(row["name"], {})[setting] = row.get("peak_bytes", 0) / 2**20
off_head, on_head = f"{off_label} img/s", f"{on_label} img/s"
print(f"{'model':24} {off_head:>22} {on_head:>22} {'ratio':>7} {'peak MiB (=0 -> =1)':>24}"
      f"   ({variable}=0 / =1, medians of {rounds} rounds)")
for name, by in rates.items():
    off, on = statistics.median(by.get(0, [0])), statistics.median(by.get(1, [0]))
    peak = peaks[name]
    print(f"{name:24} {off:22,.0f} {on:22,.0f} {on / off if off else 0:7.3f} "
          f"{peak.get(0, 0):11,.0f} -> {peak.get(1, 0):8,.0f}")
    print(f"{'':24} per round: =0 {', '.join(f'{v:,.0f}' for v in by.get(0, []))}; "
          f"=1 {', '.join(f'{v:,.0f}' for v in by.get(1, []))}")
PY
  return $status
}
