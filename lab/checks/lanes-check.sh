#!/usr/bin/env bash
# Lanes (framework/src/net_lanes.h) on a machine with an NVIDIA GPU, from the
# repository root:
#   OUT=lanes-check BUILD=/tmp/b ROUNDS=3 bash lab/checks/lanes-check.sh
# Builds; runs the lane tests and the tests of what lanes touch (stream
# branches, step graphs, gradient buckets, the convolutions' shared scratch);
# then times the headline models' bf16 training steps (CUDA graph) three
# ways, alternating, ROUNDS times: on one stream (PLEXUS_NET_LANES=0), on
# lanes of one priority (PLEXUS_LANE_PRIORITY=0) and on lanes with the
# small paths urgent (the default), and prints each model's median img/s
# and peak memory each way. TESTS=0 skips the tests, BENCH=0 the timing.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-lanes-check}
build=${BUILD:-/tmp/b}
rounds=${ROUNDS:-3}
mkdir -p "$out"
# shellcheck source=lab/checks/build-targets.sh
source lab/checks/build-targets.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt"
tests=(net_lanes_test net_branch_test step_graph_test convolution_scratch_test convolution_shared_scratch_test gradient_buckets_test)
build_targets "$out" "$build" plexus-bench "${tests[@]}"
status=0
if [ "${TESTS:-1}" != 0 ]; then
  for test in "${tests[@]}"; do run_gtest "$out" "$build" "$test" || status=1; done
fi
if [ "${BENCH:-1}" != 0 ]; then
  for round in $(seq "$rounds"); do
    for mode in one flat urgent; do
      case $mode in
        one) settings=(PLEXUS_NET_LANES=0) ;;
        flat) settings=(PLEXUS_LANE_PRIORITY=0) ;;
        urgent) settings=() ;;
      esac
      env "${settings[@]}" "$build/bin/plexus-bench" --cases lab/bench/headline_cases.json --precision bf16 \
        --models > "$out/bench-$mode-round$round.jsonl" 2> "$out/bench-$mode-round$round.err" || status=1
    done
  done
  python3 - "$out" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
modes = ("one", "flat", "urgent")
rows = {}
for mode in modes:
    for path in sorted(glob.glob(f"{out}/bench-{mode}-round*.jsonl")):
        for line in open(path):
            if line.startswith("{"):
                row = json.loads(line)
                rows.setdefault((row["name"], mode), []).append(row)
print(f"{'model':22}" + "".join(f"{m + ' img/s':>13}" for m in modes) + f"{'flat/one':>9}{'urgent/one':>11}"
      + "".join(f"{m + ' MB':>10}" for m in modes))
for name in dict.fromkeys(n for n, _ in rows):
    if not all(rows.get((name, m)) for m in modes):
        continue
    ips = {m: statistics.median(r["images_per_s"] for r in rows[(name, m)]) for m in modes}
    peak = {m: max(r["peak_bytes"] for r in rows[(name, m)]) / 2**20 for m in modes}
    print(f"{name:22}" + "".join(f"{ips[m]:13.0f}" for m in modes) + f"{ips['flat'] / ips['one']:9.3f}"
          f"{ips['urgent'] / ips['one']:11.3f}" + "".join(f"{peak[m]:10.0f}" for m in modes))
PY
fi
[ "$status" = 0 ] && echo "SUMMARY: lanes-check PASSED" || echo "SUMMARY: lanes-check FAILED"
exit "$status"
