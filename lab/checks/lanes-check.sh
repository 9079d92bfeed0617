#!/usr/bin/env bash
# Lanes (framework/src/net_lanes.h) on a machine with an NVIDIA GPU, from the
# repository root:
#   OUT=lanes-check BUILD=/tmp/b ROUNDS=3 bash lab/checks/lanes-check.sh
# Builds; runs the lane tests and the tests of what lanes touch (stream
# branches, step graphs, gradient buckets, the convolutions' shared scratch);
# then times the headline models' bf16 training steps (CUDA graph) with
# lanes and on one stream (PLEXUS_NET_LANES=0), alternating, ROUNDS times,
# and prints each model's median img/s and peak memory both ways.
# TESTS=0 skips the tests, BENCH=0 the timing.
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
    for lanes in 1 0; do
      PLEXUS_NET_LANES=$lanes "$build/bin/plexus-bench" --cases lab/bench/headline_cases.json --precision bf16 \
        --models > "$out/bench-lanes$lanes-round$round.jsonl" 2> "$out/bench-lanes$lanes-round$round.err" || status=1
    done
  done
  python3 - "$out" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
rows = {}
for lanes in ("1", "0"):
    for path in sorted(glob.glob(f"{out}/bench-lanes{lanes}-round*.jsonl")):
        for line in open(path):
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            rows.setdefault((row["name"], lanes), []).append(row)
print(f"{'model':24} {'lanes img/s':>12} {'one stream':>11} {'ratio':>6} {'peak MB lanes':>14} {'one stream':>11}")
for name in dict.fromkeys(n for n, _ in rows):
    on, off = rows.get((name, "1"), []), rows.get((name, "0"), [])
    if not on or not off:
        continue
    a = statistics.median(r["images_per_s"] for r in on)
    b = statistics.median(r["images_per_s"] for r in off)
    print(f"{name:24} {a:12.0f} {b:11.0f} {a / b:6.3f} {max(r['peak_bytes'] for r in on) / 2**20:14.0f} "
          f"{max(r['peak_bytes'] for r in off) / 2**20:11.0f}")
PY
fi
[ "$status" = 0 ] && echo "SUMMARY: lanes-check PASSED" || echo "SUMMARY: lanes-check FAILED"
exit "$status"
