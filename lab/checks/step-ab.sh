# Sourced by the lab's GPU scripts:
#   source lab/checks/step-ab.sh
#   step_ab LOGS BUILD ROUNDS VARIABLE [OFF_LABEL ON_LABEL]
# Times every bundled model's bf16 training step (plexus-bench --models, CUDA
# graph) with the environment variable VARIABLE=0 and =1, ROUNDS times,
# alternating which goes first, and prints the median images/s of each and
# their ratio. MODELS (a plexus-bench --only text, default: all models)
# narrows the run. Rows go to LOGS/steps-VARIABLE{0,1}-roundR.jsonl.
# Returns 1 when a benchmark run failed.
step_ab() {
  local logs=$1 build=$2 rounds=$3 variable=$4 off_label=${5:-off} on_label=${6:-on}
  local status=0 only=() round setting
  [ -n "${MODELS:-}" ] && only=(--only "$MODELS")
  for round in $(seq 1 "$rounds"); do
    local order=(0 1)
    [ $((round % 2)) -eq 0 ] && order=(1 0)
    for setting in "${order[@]}"; do
      env "$variable=$setting" "$build/bin/plexus-bench" --precision bf16 --models "${only[@]}" \
        > "$logs/steps-$variable$setting-round$round.jsonl" 2>> "$logs/steps.err" || status=1
    done
  done
  python3 - "$logs" "$rounds" "$variable" "$off_label" "$on_label" << 'PY'
import json, statistics, sys
logs, rounds, variable, off_label, on_label = sys.argv[1], int(sys.argv[2]), *sys.argv[3:6]
rates = {}
for setting in (0, 1):
    for r in range(1, rounds + 1):
        for line in open(f"{logs}/steps-{variable}{setting}-round{r}.jsonl"):
            row = json.loads(line)
            if row.get("kind") == "train_step_graph":
                rates.setdefault(row["name"], {}).setdefault(setting, []).append(row["images_per_s"])
off_head, on_head = f"{off_label} img/s", f"{on_label} img/s"
print(f"{'model':24} {off_head:>22} {on_head:>22} {'ratio':>7}   ({variable}=0 / =1, medians of {rounds} rounds)")
for name, by in rates.items():
    off, on = statistics.median(by.get(0, [0])), statistics.median(by.get(1, [0]))
    print(f"{name:24} {off:22,.0f} {on:22,.0f} {on / off if off else 0:7.3f}")
PY
  return $status
}
