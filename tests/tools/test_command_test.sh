#!/usr/bin/env bash
# tools/test.sh's build choice, run on a copy of it with stand-ins for
# install-deps.sh, build.sh, fuzz.sh, ctest and nvidia-smi:
# - no NVIDIA GPU visible: one line says so, and the build gets
#   -DPLEXUS_CUDA=OFF before the user's own arguments;
# - --cuda: -DPLEXUS_CUDA=ON, and --cuda itself is not passed to CMake;
# - a GPU listed: -UPLEXUS_CUDA (CMake's default: CUDA when nvcc is found);
# - .ci/run runs the test command with --cuda, so CI compiles the CUDA code.
# Usage: test_command_test.sh SOURCE_DIR
set -euo pipefail
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

repo=$work/repo
mkdir -p "$repo/tools" "$work/bin"
cp "$source_dir/tools/test.sh" "$repo/tools/"
printf '#!/usr/bin/env bash\nexit 0\n' > "$repo/tools/install-deps.sh"
printf '#!/usr/bin/env bash\nexit 0\n' > "$repo/tools/fuzz.sh"
# build.sh stand-in: records its arguments, one per line, and makes build/.
printf '#!/usr/bin/env bash\nprintf "%%s\\n" "$@" > "$TEST_COMMAND_LOGS/build.args"\nmkdir -p build\n' \
  > "$repo/tools/build.sh"
printf '#!/usr/bin/env bash\nexit 0\n' > "$work/bin/ctest"
chmod +x "$repo/tools/"*.sh "$work/bin/ctest"

cpu_line="test.sh: no NVIDIA GPU visible: building the CPU-only version (--cuda builds the CUDA code too)"

# run_tests NAME NVIDIA_SMI_BODY [ARGS...]: the test command with an nvidia-smi
# whose script body is NVIDIA_SMI_BODY; its output in NAME.out, build's arguments in NAME/build.args.
run_tests() {
  local name=$1 body=$2
  shift 2
  mkdir -p "$work/$name/bin"
  printf '#!/usr/bin/env bash\n%s\n' "$body" > "$work/$name/bin/nvidia-smi"
  chmod +x "$work/$name/bin/nvidia-smi"
  TEST_COMMAND_LOGS=$work/$name PLEXUS_FUZZ_SECONDS=0 PATH="$work/$name/bin:$work/bin:$PATH" \
    bash "$repo/tools/test.sh" "$@" > "$work/$name.out" 2>&1 || { cat "$work/$name.out"; exit 1; }
}

fail() {
  echo "test_command_test: $1"
  shift
  for f in "$@"; do echo "--- $f"; cat "$f"; done
  exit 1
}

run_tests no-gpu 'exit 9' -DCMAKE_BUILD_TYPE=Debug
grep -qxF "$cpu_line" "$work/no-gpu.out" || fail "no GPU: the CPU-only line is missing" "$work/no-gpu.out"
[ "$(cat "$work/no-gpu/build.args")" = $'-DPLEXUS_CUDA=OFF\n-DCMAKE_BUILD_TYPE=Debug' ] ||
  fail "no GPU: build.sh should get -DPLEXUS_CUDA=OFF, then the user's argument" "$work/no-gpu/build.args"

run_tests empty-list 'echo "No devices found."'
grep -qxF -- "-DPLEXUS_CUDA=OFF" "$work/empty-list/build.args" ||
  fail "nvidia-smi listing no GPU: the build should be CPU-only" "$work/empty-list/build.args"

run_tests forced 'exit 9' --cuda -DFOO=1
[ "$(cat "$work/forced/build.args")" = $'-DPLEXUS_CUDA=ON\n-DFOO=1' ] ||
  fail "--cuda: build.sh should get -DPLEXUS_CUDA=ON and the other arguments, not --cuda" "$work/forced/build.args"
if grep -qF "$cpu_line" "$work/forced.out"; then fail "--cuda: no CPU-only line expected" "$work/forced.out"; fi

run_tests gpu 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"'
[ "$(cat "$work/gpu/build.args")" = "-UPLEXUS_CUDA" ] ||
  fail "a GPU visible: build.sh should get -UPLEXUS_CUDA alone" "$work/gpu/build.args"
if grep -qF "$cpu_line" "$work/gpu.out"; then fail "a GPU visible: no CPU-only line expected" "$work/gpu.out"; fi

grep -qE '^exec tools/test.sh --cuda$' "$source_dir/.ci/run" || fail ".ci/run must run 'tools/test.sh --cuda'" "$source_dir/.ci/run"
echo "test_command_test: passed"
