#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every
# test with CTest, then runs each fuzzer briefly (tools/fuzz.sh, a separate
# clang + sanitizer build in build-fuzz/). GPU tests skip (with a reason)
# when no GPU is visible; tools/gpu-check.sh runs them on a GPU machine.
#
#   tools/test.sh              # CUDA code built only when an NVIDIA GPU is visible
#   tools/test.sh --cuda       # build (and so compile-check) the CUDA code without a GPU too
#   tools/test.sh -DFOO=BAR    # other arguments go to CMake's configure step
#
# Without a GPU, compiling the kernels for GPUs the machine does not have
# would take about half the build, and their tests would skip anyway.
# PLEXUS_FUZZ_SECONDS (default 20) sets the fuzzing time per harness; 0
# skips fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_seconds=${PLEXUS_FUZZ_SECONDS:-20}
want_cuda=0
configure=()
for argument in "$@"; do
  if [ "$argument" = --cuda ]; then want_cuda=1; else configure+=("$argument"); fi
done
if [ "$fuzz_seconds" != 0 ]; then tools/install-deps.sh --fuzz; else tools/install-deps.sh; fi
if [ "$want_cuda" = 1 ]; then
  cuda=(-DPLEXUS_CUDA=ON)
elif gpus=$(nvidia-smi -L 2>/dev/null) && grep -q '^GPU ' <<< "$gpus"; then
  cuda=(-UPLEXUS_CUDA)  # CMake's default again (CUDA when nvcc is found), whatever an earlier run chose
else
  echo "test.sh: no NVIDIA GPU visible: building the CPU-only version (--cuda builds the CUDA code too)"
  cuda=(-DPLEXUS_CUDA=OFF)
fi
tools/build.sh "${cuda[@]}" "${configure[@]}"
(cd build && ctest --output-on-failure -j "$(nproc)")
if [ "$fuzz_seconds" != 0 ]; then tools/fuzz.sh "$fuzz_seconds"; fi
