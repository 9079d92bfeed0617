#!/usr/bin/env bash
# Data-parallel training through NCCL on the GPUs of one machine. On a
# machine with an NVIDIA GPU and NCCL (found by CMake: the CUDA toolkit, the
# system, NCCL_ROOT, or python3's nvidia-nccl wheel), from the repository root:
#   lab/checks/ddp-gpu-check.sh [TRAIN_IMAGES]   # default data/train-sample
# Builds what it needs, runs the NCCL tests (collectives, the bucketed step
# eager and replayed from a CUDA graph against the plain step, a missing rank
# timing out), the plexus-ae data-parallel tests (one GPU worker against one
# process, graph on and off; two workers graph on against off, which skips
# with one GPU), then trains bmshj2018-factorized for 200 steps of 16
# patches of 256x256, once as one process and once with --gpus 1 (one
# worker, bucketed all-reduce, both with the CUDA graph), and prints both
# images/s. About 2-3 minutes.
# Logs go to $OUT (default ddp-gpu-check-logs/); BUILD names the build folder.
set -uo pipefail
cd "$(dirname "$0")/../.."
source lab/checks/build-targets.sh
logs=${OUT:-ddp-gpu-check-logs}
build=${BUILD:-build-ddp-gpu}
data=${1:-data/train-sample}
mkdir -p "$logs"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
echo "== configure + build"
build_targets "$logs" "$build" nccl_communicator_test plexus_ae_data_parallel_test plexus-ae
nccl_line=$(grep -E "NCCL" "$logs/build.log" | head -1)
echo "$nccl_line"

status=0
echo "== NCCL tests (world size 1)"
timeout 300 "$build/tests/nccl_communicator_test" > "$logs/nccl_communicator_test.log" 2>&1 || status=1
grep -E "OK \]|FAILED|SKIPPED|largest" "$logs/nccl_communicator_test.log"
echo "== plexus-ae data-parallel tests"
timeout 300 "$build/tests/plexus_ae_data_parallel_test" > "$logs/plexus_ae_data_parallel_test.log" 2>&1 || status=1
grep -E "OK \]|FAILED|SKIPPED|largest" "$logs/plexus_ae_data_parallel_test.log"
# With a GPU and NCCL nothing may skip but the two-GPU tests on one GPU.
gpus=$(nvidia-smi --list-gpus | wc -l)
if grep -h "SKIPPED \] [A-Za-z]" "$logs/nccl_communicator_test.log" "$logs/plexus_ae_data_parallel_test.log" |
     { if [ "$gpus" -lt 2 ]; then grep -v "\.TwoGpu"; else cat; fi; } | grep -q .; then
  status=1
fi

echo "== smoke: bmshj2018-factorized, 200 steps of 16x256x256"
scratch=$(mktemp -d)
images_per_second() {  # the mean of the logged windows after the first
  python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; r=[x['images_per_second'] for x in r if x['kind']=='train'][1:]; print(f'{sum(r)/len(r):.0f}' if r else 'n/a')" "$1"
}
for mode in single gpus1; do
  extra=()
  [ "$mode" = gpus1 ] && extra=(--gpus 1)
  if timeout 300 "$build/bin/plexus-ae" train --data "$data" --model bmshj2018-factorized --steps 200 --batch 16 \
       --patch 256 --log-every 50 --checkpoint-every 0 --device cuda --out "$scratch/$mode" "${extra[@]}" \
       > "$logs/smoke-$mode.log" 2>&1; then
    echo "SUMMARY: smoke $mode: $(images_per_second "$scratch/$mode/metrics.jsonl") img/s"
  else
    tail -20 "$logs/smoke-$mode.log"
    echo "SUMMARY: smoke $mode FAILED"
    status=1
  fi
done
cp "$scratch"/gpus1/metrics.jsonl "$logs/smoke-gpus1-metrics.jsonl" 2>/dev/null
rm -rf "$scratch"

echo "SUMMARY: $nccl_line"
echo "SUMMARY: nccl_communicator_test: $(grep -E '^\[  (PASSED|FAILED) ' "$logs/nccl_communicator_test.log" | tr '\n' ' ')"
echo "SUMMARY: plexus_ae_data_parallel_test: $(grep -E '^\[  (PASSED|FAILED) ' "$logs/plexus_ae_data_parallel_test.log" | tr '\n' ' ')"
[ $status -eq 0 ] && echo "SUMMARY: ddp-gpu-check PASSED" || echo "SUMMARY: ddp-gpu-check FAILED"
exit $status
