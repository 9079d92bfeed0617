#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, from the repository root:
#   tools/gpu-check.sh
# Builds for the local GPU (CMake's native architecture), runs the WHOLE test
# suite and fails if any test was skipped (with a GPU nothing may skip), runs
# the convolution tensor-core tests again with the mma.sync kernels (on a
# Hopper the default is wgmma), then runs compute-sanitizer memcheck over
# every CUDA test, builds and tests the
# example plugins (examples/plugins/*) against an installed Plexus, and
# prints a summary.
# Logs go to $OUT (default gpu-check-logs/); BUILD names the build folder
# (default build-gpu). KODAK names the folder of the 24 full-size Kodak
# images (kodim01.png .. kodim24.png, r0k.us/graphics/kodak): the
# channel-conditional codec's cross-device test runs over every one of them,
# and skips (failing this check) without it. Tools.KodakCrops needs
# ImageMagick (convert, identify; Debian: imagemagick) and likewise skips,
# failing this check, without it.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0  # data-parallel tests: NVLink multicast stays off
logs=${OUT:-gpu-check-logs}
mkdir -p "$logs"
build=${BUILD:-build-gpu}
jobs=$(nproc)

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
echo "== configure + build"
if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=native && cmake --build "$build" -j "$jobs"; } > "$logs/build.log" 2>&1; then
  tail -60 "$logs/build.log"
  echo "SUMMARY: build FAILED"
  exit 1
fi

echo "== ctest"
[ -n "${KODAK:-}" ] && export PLEXUS_KODAK_DIR=$(realpath "$KODAK")
(cd "$build" && ctest -j 8 --output-on-failure --timeout 900) > "$logs/ctest.log" 2>&1
ctest_rc=$?
tests_line=$(grep -E "tests passed" "$logs/ctest.log" | tail -1)
# Tests named TwoGpu* need two GPUs: on a machine with one they may skip.
gpus=$(nvidia-smi --list-gpus | wc -l)
skipped=$(grep -E "\(Skipped\)" "$logs/ctest.log" | { if [ "$gpus" -lt 2 ]; then grep -v "\.TwoGpu"; else cat; fi; } | wc -l)
grep -E "\(Failed\)|\(SEGFAULT\)|\(Timeout\)|\(Subprocess aborted\)|Exception" "$logs/ctest.log" | head -40

# Data-parallel training through NCCL at world size 1 (tests/distributed/
# nccl_communicator_test.cpp and the --gpus tests of plexus-ae); they skip,
# and so fail this check, when CMake did not find NCCL.
nccl_found=$(grep -E "^-- NCCL" "$logs/build.log" | head -1)
nccl_tests=$(grep -E "(NcclCommunicator|PlexusAeDataParallel)\." "$logs/ctest.log" | grep -cE "Passed")
nccl_total=$(grep -E "(NcclCommunicator|PlexusAeDataParallel)\." "$logs/ctest.log" | grep -cE "Test +#")

# On a Hopper the convolutions' tap-major passes run wgmma kernels; every
# other GPU runs the mma.sync ones. Their tensor-core tests again, with the
# mma.sync kernels forced, so both paths are checked on this GPU.
echo "== convolution tensor-core tests with the mma.sync kernels (PLEXUS_CONV_WGMMA=0)"
mma_sync_ok=1
for t in conv2d_test conv_transpose2d_test; do
  PLEXUS_CONV_WGMMA=0 timeout 600 "$build/tests/$t" --gtest_brief=1 --gtest_filter='*TensorCore*' \
    > "$logs/$t-mma-sync.log" 2>&1 || mma_sync_ok=0
  grep -E "^\[  (PASSED|FAILED) " "$logs/$t-mma-sync.log"
done

echo "== compute-sanitizer memcheck over the CUDA tests"
memcheck_errors=0
memcheck_runs=0
: > "$logs/memcheck.log"
for binary in "$build"/tests/*_test; do
  list=$("$binary" --gtest_list_tests --gtest_filter='*Cuda*' 2>/dev/null | grep -c '^  ')
  [ "$list" -gt 0 ] || continue
  memcheck_runs=$((memcheck_runs + 1))
  out=$(compute-sanitizer --tool memcheck --error-exitcode 99 "$binary" --gtest_filter='*Cuda*' 2>&1)
  rc=$?
  echo "$out" >> "$logs/memcheck.log"
  summary=$(echo "$out" | grep -E "ERROR SUMMARY" | tail -1)
  echo "$(basename "$binary"): rc=$rc ${summary}"
  if [ $rc -ne 0 ]; then memcheck_errors=$((memcheck_errors + 1)); fi
done

# The out-of-tree example plugins, each built against an installed Plexus.
plugin_lines=()
prefix=$PWD/$build/install
installed=0
for plugin in simplified_gdn sparse_conv; do
  [ -f examples/plugins/$plugin/CMakeLists.txt ] && [ -f cmake/PlexusInstall.cmake ] || continue
  if [ $installed -eq 0 ]; then
    cmake --install "$build" --prefix "$prefix" > "$logs/plugin-install.log" 2>&1 && installed=1
  fi
  log=$logs/plugin-$plugin.log
  if [ $installed -eq 1 ] &&
     cmake -S examples/plugins/$plugin -B "$build/plugin-$plugin" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
       -DCMAKE_CUDA_ARCHITECTURES=native > "$log" 2>&1 &&
     cmake --build "$build/plugin-$plugin" -j "$jobs" >> "$log" 2>&1 &&
     (cd "$build/plugin-$plugin" && ctest --output-on-failure) >> "$log" 2>&1; then
    plugin_tests=$(grep -E "tests passed" "$log" | tail -1)
    plugin_skipped=$(grep -cE "\(Skipped\)" "$log")
    plugin_lines+=("plugin $plugin: $plugin_tests; skipped: $plugin_skipped")
    skipped=$((skipped + plugin_skipped))
    for binary in "$build/plugin-$plugin"/*_test; do
      [ -x "$binary" ] || continue
      out=$(compute-sanitizer --tool memcheck --error-exitcode 99 "$binary" --gtest_filter='*Cuda*' 2>&1)
      rc=$?
      echo "$out" >> "$logs/memcheck.log"
      echo "$(basename "$binary") ($plugin): rc=$rc $(echo "$out" | grep -E "ERROR SUMMARY" | tail -1)"
      memcheck_runs=$((memcheck_runs + 1))
      if [ $rc -ne 0 ]; then memcheck_errors=$((memcheck_errors + 1)); fi
    done
  else
    tail -40 "$log" 2>/dev/null || tail -40 "$logs/plugin-install.log"
    plugin_lines+=("plugin $plugin: FAILED (see $(basename "$log"))")
    ctest_rc=1
  fi
done
[ ${#plugin_lines[@]} -gt 0 ] || plugin_lines=("example plugins: not present")

echo
echo "SUMMARY: ctest: ${tests_line:-no result} (rc=$ctest_rc); skipped: $skipped$([ "$gpus" -lt 2 ] && echo " (the two-GPU tests not counted: one GPU visible)")"
for line in "${plugin_lines[@]}"; do echo "SUMMARY: $line"; done
echo "SUMMARY: data-parallel (NCCL): $nccl_tests of $nccl_total passed; ${nccl_found:-NCCL not reported by CMake}"
echo "SUMMARY: memcheck: $memcheck_runs binaries, $memcheck_errors with errors"
echo "SUMMARY: convolution tensor-core tests with the mma.sync kernels: $([ $mma_sync_ok = 1 ] && echo passed || echo FAILED)"
if [ $ctest_rc -ne 0 ] || [ "$skipped" -ne 0 ] || [ $memcheck_errors -ne 0 ] || [ $mma_sync_ok -ne 1 ]; then
  echo "SUMMARY: gpu-check FAILED"
  exit 1
fi
echo "SUMMARY: gpu-check PASSED"
