#!/usr/bin/env bash
# The headline table of docs/performance.md, in one command. On a machine with
# an NVIDIA GPU and PyTorch (python3 -c 'import torch'), from the repository root:
#   bash lab/bench/headline.sh [--rounds N] [--only TEXT] [--cases FILE] [--results DIR] [--timed-steps N]
#                              [--adam fused|foreach] [--build-only]
# 1. builds plexus-bench (-DPLEXUS_BUILD_BENCH=ON, Release, this GPU's
#    architecture) into $BUILD (default /tmp/plexus-headline-build, outside the
#    repository; an existing build keeps its settings and is brought up to date);
# 2. runs N rounds (default 3) of both sides on the models of the cases file
#    (default lab/bench/headline_cases.json: every bundled 2018 model and
#    bls2017, batch 16 of 256x256 crops), odd rounds Plexus first, even rounds
#    PyTorch first, all at bf16:
#      Plexus   plexus-bench --precision bf16 --models: its step replayed as a
#               CUDA graph ("train_step_graph"); the first round adds --profile,
#               whose per-node FLOP counts give the FLOPs per step;
#      PyTorch  torch_bench.py --precision bf16 --models --setting
#               eager,compile,strongest --span: eager, torch.compile, and the
#               strongest setting (torch_strongest.py: max-autotune kernels,
#               bf16 autocast, channels_last, capturable Adam, the whole step
#               as one CUDA graph), each timed over --timed-steps (default 50)
#               consecutive steps between two CUDA events; each run also times
#               an 8192^3 bf16 matmul, the measured peak;
# 3. writes one JSON per model into --results (default lab/results/speed/:
#    <model>.json, with the device from nvidia-smi, the commit from git and
#    this command) and prints the markdown table (lab/bench/headline.py).
# --only TEXT keeps the models whose name contains TEXT (e.g. --only bls2017),
# for a shorter run; each model's file stands alone. --cases
# lab/bench/layers_v2_cases.json runs tcm-small's step and the one-layer steps
# of the newer layers (grouped, depthwise and dilated convolution, LayerNorm,
# window attention), one at a time with --only NAME. --build-only stops after
# step 1 (a later run then finds the build up to date). --adam picks the
# strongest setting's capturable Adam (default fused). The raw JSON lines, the
# build's and PyTorch's logs and the table go to $OUT (default
# $BUILD/headline-logs). PYTHON names the Python with PyTorch (default python3).
# COMMIT names the commit in the result files (default: git's HEAD, "-dirty"
# when tracked files differ from it).
set -euo pipefail
cd "$(dirname "$0")/../.."
usage="usage: bash lab/bench/headline.sh [--rounds N] [--only TEXT] [--cases FILE] [--results DIR] [--timed-steps N]
       [--adam fused|foreach] [--build-only]"
rounds=3 only="" cases=lab/bench/headline_cases.json results=lab/results/speed timed_steps=50 build_only=0 adam=fused
whole_number() {  # name value: digits only, >= 1; prints the number in base 10 ("08" is 8)
  if ! [[ $2 =~ ^[0-9]+$ ]] || ((10#$2 < 1)); then
    echo "headline.sh: $1 must be a whole number >= 1, got '$2'" >&2
    exit 2
  fi
  echo $((10#$2))
}
command_line="bash lab/bench/headline.sh"
for arg in "$@"; do command_line+=" $(printf '%q' "$arg")"; done
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds|--only|--cases|--results|--timed-steps|--adam)
      [ $# -ge 2 ] || { echo "headline.sh: $1 needs a value" >&2; echo "$usage" >&2; exit 2; } ;;&
    --rounds) rounds=$(whole_number --rounds "$2"); shift 2 ;;
    --only) only=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --timed-steps) timed_steps=$(whole_number --timed-steps "$2"); shift 2 ;;
    --adam)
      [[ $2 == fused || $2 == foreach ]] ||
        { echo "headline.sh: --adam must be fused or foreach, got '$2'" >&2; exit 2; }
      adam=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "headline.sh: unknown option '$1'" >&2; echo "$usage" >&2; exit 2 ;;
  esac
done
[ -f "$cases" ] || { echo "headline.sh: no cases file '$cases'" >&2; exit 2; }
python=${PYTHON:-python3}
build=${BUILD:-/tmp/plexus-headline-build}
logs=${OUT:-$build/headline-logs}
command -v nvidia-smi > /dev/null || { echo "headline.sh: nvidia-smi not found: this needs an NVIDIA GPU" >&2; exit 1; }
mkdir -p "$logs"

echo "== build plexus-bench into $build (log: $logs/build.log)" >&2
# A new build folder is configured for this GPU without the tests; an existing
# one (say tools/gpu-check.sh's, BUILD=build-gpu) keeps its settings and only
# gains the benchmarks, so the two can share one build.
configure=(-DPLEXUS_BUILD_BENCH=ON)
[ -f "$build/CMakeCache.txt" ] ||
  configure+=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=native -DPLEXUS_BUILD_TESTS=OFF)
if ! { cmake -S . -B "$build" "${configure[@]}" &&
       cmake --build "$build" --target plexus-bench -j "$(nproc)"; } > "$logs/build.log" 2>&1; then
  tail -40 "$logs/build.log" >&2
  echo "headline.sh: the build failed (log: $logs/build.log)" >&2
  exit 1
fi
[ "$build_only" = 1 ] && exit 0
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null ||
  { echo "headline.sh: $python has no PyTorch that sees a CUDA GPU" >&2; exit 1; }
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if [ -n "${COMMIT:-}" ]; then
  commit=$COMMIT  # a copy of the tree without .git names its commit so
else
  commit=$(git rev-parse --short HEAD 2> /dev/null || echo unknown)
  git diff --quiet HEAD 2> /dev/null || commit+="-dirty"  # tracked files differ from the commit
fi

only_args=()
[ -n "$only" ] && only_args=(--only "$only")
: > "$logs/plexus.jsonl"
: > "$logs/torch.jsonl"
: > "$logs/torch.err"
plexus_side() {  # round
  local profile=()
  [ "$1" -eq 1 ] && profile=(--profile)
  "$build/bin/plexus-bench" --cases "$cases" --precision bf16 --models ${only_args[@]+"${only_args[@]}"} \
    ${profile[@]+"${profile[@]}"} >> "$logs/plexus.jsonl"
}
torch_side() {
  "$python" lab/bench/torch_bench.py --cases "$cases" --precision bf16 --models --setting eager,compile,strongest \
    --span --timed-steps "$timed_steps" --adam "$adam" ${only_args[@]+"${only_args[@]}"} \
    >> "$logs/torch.jsonl" 2>> "$logs/torch.err" ||
    { tail -20 "$logs/torch.err" >&2; echo "headline.sh: torch_bench.py failed (log: $logs/torch.err)" >&2; exit 1; }
}
for ((round = 1; round <= rounds; round++)); do
  echo "== round $round of $rounds" >&2
  if ((round % 2)); then
    plexus_side "$round"
    torch_side
  else
    torch_side
    plexus_side "$round"
  fi
done
grep "failed, no row" "$logs/torch.err" >&2 || true
"$python" lab/bench/headline.py write --plexus "$logs/plexus.jsonl" --torch "$logs/torch.jsonl" --cases "$cases" \
  --out "$results" --device "$device" --commit "$commit" --command "$command_line" ${only_args[@]+"${only_args[@]}"} |
  tee "$logs/table.md"
