#!/usr/bin/env bash
# tools/quickstart.sh's choices, run on a copy of it with stand-ins for
# install-deps.sh, cmake, nvidia-smi and the plexus-ae it builds:
# - no NVIDIA GPU visible (nvidia-smi fails, or lists none): one line says
#   so and the configure step gets -DPLEXUS_CUDA=OFF, before the user's own
#   arguments; a GPU listed: no such line, no -DPLEXUS_CUDA=OFF;
# - the training settings it passes do not contradict each other: the real
#   plexus-ae, given them for one step, prints no note that one of them is
#   without effect;
# - with "numbers": the real plexus-ae runs the quickstart's whole training
#   and evaluation on the CPU, and the mean PSNR and bpp it ends with are the
#   ones the README states for the build's CPU instruction set (CPU_ARCH, the
#   -march CMake chose: x86-64-v3, "ends around X dB at Y bpp"; OFF, "baseline
#   instruction set, around X dB at Y bpp"), within 0.3 dB and 0.03 bpp (a
#   few minutes on 2 cores). The README states none for other instruction
#   sets (FMA and wider vectors round training's sums differently): skipped,
#   exit 77.
# Usage: quickstart_test.sh SOURCE_DIR PLEXUS_AE [numbers CPU_ARCH]
set -euo pipefail
source_dir=$1
plexus_ae=$2
mode=${3:-}
cpu_arch=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

repo=$work/repo
mkdir -p "$repo/tools" "$work/bin"
cp "$source_dir/tools/quickstart.sh" "$repo/tools/"
ln -s "$source_dir/data" "$repo/data"
printf '#!/usr/bin/env bash\nexit 0\n' > "$repo/tools/install-deps.sh"
# plexus-ae stand-in: records its arguments, one per line, per command.
cat > "$work/fake-plexus-ae" <<'FAKE'
#!/usr/bin/env bash
printf '%s\n' "$@" > "$QUICKSTART_TEST_LOGS/plexus-ae-$1.args"
FAKE
# cmake stand-in: records the configure line; "building" installs the stand-in above.
cat > "$work/bin/cmake" <<'FAKE'
#!/usr/bin/env bash
if [ "$1" = --build ]; then
  mkdir -p build/bin && cp "$QUICKSTART_TEST_LOGS/../fake-plexus-ae" build/bin/plexus-ae
else
  echo "$*" > "$QUICKSTART_TEST_LOGS/configure.txt"
fi
FAKE
chmod +x "$repo/tools/"*.sh "$work/fake-plexus-ae" "$work/bin/cmake"

cpu_line="quickstart: no NVIDIA GPU visible: building the CPU-only version (-DPLEXUS_CUDA=OFF)"

# run_quickstart NAME NVIDIA_SMI_BODY [ARGS...]: the quickstart with an
# nvidia-smi whose script body is NVIDIA_SMI_BODY; its output in NAME.out.
run_quickstart() {
  local name=$1 body=$2
  shift 2
  mkdir -p "$work/$name/bin"
  printf '#!/usr/bin/env bash\n%s\n' "$body" > "$work/$name/bin/nvidia-smi"
  chmod +x "$work/$name/bin/nvidia-smi"
  rm -rf "$repo/build"
  QUICKSTART_TEST_LOGS=$work/$name PATH="$work/$name/bin:$work/bin:$PATH" \
    bash "$repo/tools/quickstart.sh" "$@" > "$work/$name.out" 2>&1 || { cat "$work/$name.out"; exit 1; }
}

fail() {
  echo "quickstart_test: $1"
  shift
  for file in "$@"; do echo "--- $file"; cat "$file"; done
  exit 1
}

run_quickstart failing 'echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver"; exit 9'
run_quickstart none 'echo "No devices were found"; exit 6'
run_quickstart empty 'exit 0'
run_quickstart user_choice 'exit 9' -DPLEXUS_CUDA=ON
for name in failing none empty user_choice; do
  grep -qxF "$cpu_line" "$work/$name.out" || fail "$name: no line '$cpu_line'" "$work/$name.out"
  grep -q -- "-DPLEXUS_CUDA=OFF" "$work/$name/configure.txt" || fail "$name: not configured CPU-only" "$work/$name/configure.txt"
done
# The user's arguments come after the choice, so theirs wins.
grep -q -- "-DPLEXUS_CUDA=OFF -DPLEXUS_CUDA=ON" "$work/user_choice/configure.txt" ||
  fail "the user's -DPLEXUS_CUDA=ON does not follow the choice" "$work/user_choice/configure.txt"

run_quickstart gpu 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-2b3e9d3c-0000-0000-0000-000000000000)"'
if grep -q "no NVIDIA GPU visible" "$work/gpu.out"; then fail "a GPU was listed, yet:" "$work/gpu.out"; fi
if grep -q -- "-DPLEXUS_CUDA=OFF" "$work/gpu/configure.txt"; then
  fail "a GPU was listed, yet configured CPU-only" "$work/gpu/configure.txt"
fi
test -s "$work/gpu/plexus-ae-eval.args" || fail "the quickstart did not evaluate" "$work/gpu.out"

# The real plexus-ae with the quickstart's training settings, for one step.
mapfile -t train < "$work/gpu/plexus-ae-train.args"
for ((i = 1; i < ${#train[@]}; ++i)); do
  case ${train[i - 1]} in
    --steps) train[i]=1 ;;
    --out) train[i]=$work/run ;;
  esac
done
(cd "$repo" && "$plexus_ae" "${train[@]}") > "$work/train.out" 2>&1 || fail "plexus-ae ${train[*]} failed" "$work/train.out"
test -s "$work/run/model.safetensors" || fail "one step wrote no model" "$work/train.out"
if grep -q "acts on validations\|without --val" "$work/train.out"; then
  fail "the quickstart's settings contradict each other:" "$work/train.out"
fi

if [ "$mode" = numbers ]; then
  case $cpu_arch in
    x86-64-v3) phrase="ends? around [0-9.]+ dB at [0-9.]+ bpp" ;;
    OFF) phrase="baseline instruction set, around [0-9.]+ dB at [0-9.]+ bpp" ;;
    *) echo "quickstart_test: the README states no quickstart numbers for -march=$cpu_arch: skipped"; exit 77 ;;
  esac
  # The whole run, on the CPU (the README's numbers are the CPU's).
  mapfile -t train < "$work/gpu/plexus-ae-train.args"
  mapfile -t evaluate < "$work/gpu/plexus-ae-eval.args"
  for ((i = 1; i < ${#train[@]}; ++i)); do
    case ${train[i - 1]} in
      --out) train[i]=$work/full ;;
      --device) train[i]=cpu ;;
    esac
  done
  for ((i = 1; i < ${#evaluate[@]}; ++i)); do
    case ${evaluate[i - 1]} in
      --model) evaluate[i]=$work/full/model.safetensors ;;
      --out) evaluate[i]=$work/reconstructions ;;
      --device) evaluate[i]=cpu ;;
    esac
  done
  (cd "$repo" && "$plexus_ae" "${train[@]}") > "$work/full-train.out" 2>&1 ||
    fail "plexus-ae ${train[*]} failed" "$work/full-train.out"
  (cd "$repo" && "$plexus_ae" "${evaluate[@]}") > "$work/eval.out" 2> "$work/eval.err" ||
    fail "plexus-ae ${evaluate[*]} failed" "$work/eval.out" "$work/eval.err"
  # The mean row: "mean  n=3  PSNR  bpp  ..."
  read -r psnr bpp < <(awk '$1 == "mean" { print $3, $4 }' "$work/eval.out") ||
    fail "eval printed no mean row" "$work/eval.out"
  # The README's sentence may wrap: read it as one line.
  stated=$(tr '\n' ' ' < "$source_dir/README.md" | grep -oE "$phrase" | head -1 | grep -oE "around .*" || true)
  [ -n "$stated" ] || fail "the README states no quickstart numbers for $cpu_arch ('$phrase')"
  read -r stated_psnr stated_bpp < <(awk '{ print $2, $5 }' <<< "$stated")
  echo "quickstart: ${psnr} dB at ${bpp} bpp; the README says ${stated_psnr} dB at ${stated_bpp} bpp"
  awk -v a="$psnr" -v b="$stated_psnr" -v c="$bpp" -v d="$stated_bpp" \
    'BEGIN { exit !(a - b <= 0.3 && b - a <= 0.3 && c - d <= 0.03 && d - c <= 0.03) }' ||
    fail "the README's quickstart numbers are not what the quickstart gives" "$work/eval.out"
fi
echo "quickstart_test: passed"
