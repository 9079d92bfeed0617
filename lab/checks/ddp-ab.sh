#!/usr/bin/env bash
# Data-parallel scaling of this tree against another, on a machine with
# several NVIDIA GPUs and NCCL, from the repository root:
#   bash lab/checks/ddp-ab.sh BASE_TREE TRAIN_IMAGES [ROUNDS] [STEPS]   # default 3 rounds of 1500 steps
# BASE_TREE is another checkout of the project (e.g. git worktree add
# /tmp/base <commit>). Builds plexus-ae in both (BUILD, default build-gpu,
# and BASE_BUILD, default BASE_TREE/build-gpu), then runs
# lab/experiments/ddp-scaling.sh (COUNTS, default "0 4"; MODELS, default
# bmshj2018-factorized and bmshj2018-hyperprior) with each binary, ROUNDS
# times, alternating which goes first, and prints each run's rows and, per
# model and GPU count, the median images/s of each side, their ratio and
# each side's median ratio against N single processes (vs_one_process).
# With SWITCH=VAR (e.g. SWITCH=PLEXUS_REDUCE_BESIDE_BRANCH) BASE_TREE is
# not used (give "-"): the base side is this tree's binary run with VAR=0.
# Logs go to $OUT (default ddp-ab-logs/).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source lab/checks/build-targets.sh
base=${1:?usage: ddp-ab.sh BASE_TREE TRAIN_IMAGES [ROUNDS] [STEPS]}
data=${2:?usage: ddp-ab.sh BASE_TREE TRAIN_IMAGES [ROUNDS] [STEPS]}
rounds=${3:-3}
steps=${4:-1500}
logs=${OUT:-ddp-ab-logs}
build=${BUILD:-build-gpu}
base_build=${BASE_BUILD:-$base/build-gpu}
export COUNTS=${COUNTS:-0 4}
export MODELS=${MODELS:-bmshj2018-factorized bmshj2018-hyperprior}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
data=$(cd "$data" && pwd)
switch=${SWITCH:-}
build_targets "$logs" "$build" plexus-ae
build=$(cd "$build" && pwd)
if [ -n "$switch" ]; then
  base_build=$build
else
  mkdir -p "$logs/base"
  (cd "$base" && build_targets "$logs/base" "$base_build" plexus-ae)
  base_build=$(cd "$base_build" && pwd)
fi
for round in $(seq 1 "$rounds"); do
  order=(base this)
  [ $((round % 2)) -eq 0 ] && order=(this base)
  for side in "${order[@]}"; do
    binary_build=$build setting=()
    [ "$side" = base ] && binary_build=$base_build
    [ "$side" = base ] && [ -n "$switch" ] && setting=("$switch=0")
    echo "== round $round, $side${setting[*]:+ (${setting[*]})}"
    env "${setting[@]}" OUT="$logs/$side-round$round" BUILD="$binary_build" \
      bash lab/experiments/ddp-scaling.sh "$data" "$steps"
  done
done
python3 - "$logs" "$rounds" << 'PY'
import json, statistics, sys
logs, rounds = sys.argv[1], int(sys.argv[2])
rates, vs = {}, {}
for side in ("base", "this"):
    for r in range(1, rounds + 1):
        try:
            lines = open(f"{logs}/{side}-round{r}/scaling.jsonl").read().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            row = json.loads(line)
            key = (row["model"], row["gpus"])
            rates.setdefault(key, {}).setdefault(side, []).append(row["images_per_second"])
            if row["vs_one_process"] is not None:
                vs.setdefault(key, {}).setdefault(side, []).append(row["vs_one_process"])
med = lambda values: statistics.median(values) if values else float("nan")
print(f"{'model':24} {'--gpus':>6} {'base img/s':>11} {'this img/s':>11} {'ratio':>7} {'base vs 1':>10} {'this vs 1':>10}"
      f"   (medians of {rounds} rounds; vs 1: against N single processes of the same round)")
for key, by in sorted(rates.items()):
    b, t = med(by.get("base", [])), med(by.get("this", []))
    vb, vt = med(vs.get(key, {}).get("base", [])), med(vs.get(key, {}).get("this", []))
    print(f"{key[0]:24} {key[1]:>6} {b:11.0f} {t:11.0f} {t / b if b else 0:7.3f} {vb:10.3f} {vt:10.3f}")
PY
