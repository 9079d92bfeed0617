#!/usr/bin/env bash
# Scaling of data-parallel training. On a machine with several NVIDIA GPUs
# and NCCL, from the repository root:
#   lab/experiments/ddp-scaling.sh BSDS500_TRAIN_DIR [STEPS]
# For each of MODELS (default bmshj2018-factorized, bmshj2018-hyperprior and
# bls2017) at 16 patches of 256x256 per GPU, trains STEPS steps (default
# 600) as one process (--gpus 0, the CUDA-graph step) and with --gpus 1, 2,
# 4 and 8 (as many as are visible), reads images/s (all GPUs together) from
# metrics.jsonl, over the windows after the first, and prints two
# ratios: efficiency = img/s(N) / (N * img/s(--gpus 1)), and
# vs_one_process = img/s(N) / (N * img/s(--gpus 0)), the speed of N GPUs
# against N times the best single GPU. CUDA_GRAPH=off launches the
# data-parallel steps eagerly (the one process keeps its graph);
# GRADIENT_BUCKET_MB sets plexus-ae's --gradient-bucket-mb; COUNTS (e.g.
# "0 4") picks the --gpus values.
# Rows go to $OUT/scaling.jsonl (default ddp-scaling-logs/). BUILD names a
# build folder holding bin/plexus-ae (default build). NVLink multicast stays
# off (NCCL_NVLS_ENABLE=0) unless the environment says otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
data=${1:?usage: lab/experiments/ddp-scaling.sh TRAIN_IMAGES [STEPS]}
steps=${2:-600}
logs=${OUT:-ddp-scaling-logs}
build=${BUILD:-build}
device=${DEVICE:-cuda}        # DEVICE=cpu checks this script on the CPU (--gpus 1 only)
patch=${PATCH:-256}
batch=${BATCH:-16}
models=${MODELS:-bmshj2018-factorized bmshj2018-hyperprior bls2017}
cuda_graph=${CUDA_GRAPH:-on}
bucket=()
[ -n "${GRADIENT_BUCKET_MB:-}" ] && bucket=(--gradient-bucket-mb "$GRADIENT_BUCKET_MB")
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
mkdir -p "$logs"
: > "$logs/scaling.jsonl"
if [ "$device" = cpu ]; then visible=1; else visible=$(nvidia-smi --list-gpus | wc -l); fi
counts=(0)
for n in 1 2 4 8; do [ "$n" -le "$visible" ] && counts+=("$n"); done
[ "$device" = cpu ] && counts=(0 1)
[ -n "${COUNTS:-}" ] && read -r -a counts <<< "$COUNTS"
log_every=$((steps / 4))
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Images per second over the windows after the first: their images over
# their time (each window's time = its steps / its rate, so a slow window
# weighs by how long it took).
mean_images_per_second() {
  python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if r['kind'] == 'train']
steps = [b['step'] - a['step'] for a, b in zip(rows, rows[1:])]
rates = [r['images_per_second'] for r in rows[1:]]
time = sum(n / v for n, v in zip(steps, rates) if v > 0)
print(sum(steps) / time if time > 0 else 0)" "$1"
}

# ratio N IPS BASE: IPS / (N * BASE), or null for N = 0 or no base.
ratio() {
  python3 -c "import sys; n,ips,base=int(sys.argv[1]),float(sys.argv[2]),float(sys.argv[3]); print(f'{ips/(n*base):.3f}' if n>0 and base>0 else 'null')" "$1" "$2" "$3"
}

for model in $models; do
  base=0 single=0
  for n in "${counts[@]}"; do
    out="$scratch/$model-$n"
    graph=$cuda_graph extra=("${bucket[@]}")
    [ "$n" = 0 ] && graph=on extra=()
    if ! "$build/bin/plexus-ae" train --data "$data" --model "$model" --steps "$steps" --batch "$batch" \
         --patch "$patch" --log-every "$log_every" --checkpoint-every 0 --device "$device" --gpus "$n" \
         --cuda-graph "$graph" ${extra[@]+"${extra[@]}"} --out "$out" > "$logs/$model-gpus$n.log" 2>&1; then
      tail -20 "$logs/$model-gpus$n.log"
      echo "FAILED: $model --gpus $n"
      continue
    fi
    ips=$(mean_images_per_second "$out/metrics.jsonl")
    [ "$n" = 0 ] && single=$ips
    [ "$n" = 1 ] && base=$ips
    efficiency=$(ratio "$n" "$ips" "$base")
    vs_one_process=$(ratio "$n" "$ips" "$single")
    printf '%-22s --gpus %s  %8.0f img/s  efficiency %s  vs one process %s\n' "$model" "$n" "$ips" "$efficiency" \
      "$vs_one_process"
    printf '{"model": "%s", "gpus": %s, "cuda_graph": "%s", "gradient_bucket_mb": "%s", "batch_per_gpu": %s, "patch": %s, "steps": %s, "images_per_second": %s, "efficiency": %s, "vs_one_process": %s}\n' \
      "$model" "$n" "$graph" "${GRADIENT_BUCKET_MB:-default}" "$batch" "$patch" "$steps" "$ips" "$efficiency" "$vs_one_process" >> "$logs/scaling.jsonl"
  done
done
