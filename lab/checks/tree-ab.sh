#!/usr/bin/env bash
# Training steps of this tree against another, on a machine with an NVIDIA
# GPU, from the repository root:
#   bash lab/checks/tree-ab.sh BASE_TREE [ROUNDS]     # default 3 rounds
# BASE_TREE is another checkout of the project (e.g. the same tree with a
# change reversed: cp -r . /tmp/base && patch -d /tmp/base -R -p1 < change.patch).
# Builds plexus-bench in both (BUILD, default build-gpu, and BASE_BUILD,
# default BASE_TREE/build-gpu), then times every bundled model's bf16 step
# (plexus-bench --models, CUDA graph) with each binary, ROUNDS times,
# alternating which goes first, and prints the median images/s of each, their
# ratio and each side's peak memory. MODELS (plexus-bench --only texts,
# separated by spaces, e.g. "bmshj2018 bls2017") narrows the models.
# PROFILE (model names, e.g. "bmshj2018-factorized") adds each named
# model's per-node times, eager, both trees side by side
# (plexus-bench --profile, lab/bench/profile_table.py). Rows go to $OUT (default tree-ab-logs/).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source lab/checks/build-targets.sh
base=${1:?usage: tree-ab.sh BASE_TREE [ROUNDS]}
rounds=${2:-3}
logs=${OUT:-tree-ab-logs}
build=${BUILD:-build-gpu}
base_build=${BASE_BUILD:-$base/build-gpu}
mkdir -p "$logs/base"
logs=$(cd "$logs" && pwd)
build_targets "$logs" "$build" plexus-bench
(cd "$base" && build_targets "$logs/base" "$base_build" plexus-bench)
# The plexus-bench of side "base" or "this".
bench_of() { if [ "$1" = base ]; then echo "$base_build/bin/plexus-bench"; else echo "$build/bin/plexus-bench"; fi; }
read -r -a texts <<< "${MODELS:-}"
[ ${#texts[@]} -gt 0 ] || texts=("")
status=0
for round in $(seq 1 "$rounds"); do
  order=(base this)
  [ $((round % 2)) -eq 0 ] && order=(this base)
  for side in "${order[@]}"; do
    binary=$(bench_of "$side")
    : > "$logs/steps-$side-round$round.jsonl"
    for text in "${texts[@]}"; do
      "$binary" --precision bf16 --models --only "$text" >> "$logs/steps-$side-round$round.jsonl" \
        2>> "$logs/steps.err" || status=1
    done
  done
done
python3 - "$logs" "$rounds" << 'PY'
import json, statistics, sys
logs, rounds = sys.argv[1], int(sys.argv[2])
rates, peaks = {}, {}
for side in ("base", "this"):
    for r in range(1, rounds + 1):
        for line in open(f"{logs}/steps-{side}-round{r}.jsonl"):
            row = json.loads(line)
            if row.get("kind") == "train_step_graph":
                rates.setdefault(row["name"], {}).setdefault(side, []).append(row["images_per_s"])
                if "peak_bytes" in row:
                    peaks.setdefault(row["name"], {})[side] = row["peak_bytes"] / 2**20
print(f"{'model':24} {'base img/s':>12} {'this img/s':>12} {'ratio':>7} {'base MiB':>9} {'this MiB':>9}"
      f"   (medians of {rounds} rounds; every round: base / this)")
for name, by in rates.items():
    b, t = statistics.median(by.get("base", [0])), statistics.median(by.get("this", [0]))
    pk = peaks.get(name, {})
    each = " ".join(f"{x:,.0f}/{y:,.0f}" for x, y in zip(by.get("base", []), by.get("this", [])))
    print(f"{name:24} {b:12,.0f} {t:12,.0f} {t / b if b else 0:7.3f} {pk.get('base', 0):9.0f} {pk.get('this', 0):9.0f}"
          f"   {each}")
PY
for model in ${PROFILE:-}; do
  for side in base this; do
    "$(bench_of "$side")" --precision bf16 --models --only "$model" --profile > "$logs/profile-$side-$model.jsonl" \
      2>> "$logs/steps.err" || status=1
  done
  echo
  python3 lab/bench/profile_table.py "$logs/profile-base-$model.jsonl" "$logs/profile-this-$model.jsonl" || status=1
done
[ $status -eq 0 ] && echo "SUMMARY: tree-ab done" || echo "SUMMARY: tree-ab FAILED (see steps.err)"
exit $status
