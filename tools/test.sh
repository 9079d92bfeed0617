#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every
# test with CTest, then runs each fuzzer briefly (tools/fuzz.sh, a separate
# clang + sanitizer build in build-fuzz/). GPU tests skip (with a reason)
# when no GPU is visible; tools/gpu-check.sh runs them on the GPU machine.
# PLEXUS_FUZZ_SECONDS (default 20) sets the fuzzing time per harness; 0
# skips fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_seconds=${PLEXUS_FUZZ_SECONDS:-20}
if [ "$fuzz_seconds" != 0 ]; then tools/install-deps.sh --fuzz; else tools/install-deps.sh; fi
# The CUDA code is compiled whenever nvcc is found, GPU or not (-U drops a
# CPU-only choice cached in build/ by an earlier quickstart on a machine
# without a GPU); -DPLEXUS_CUDA=OFF among the arguments still turns it off.
tools/build.sh -UPLEXUS_CUDA "$@"
(cd build && ctest --output-on-failure -j "$(nproc)")
if [ "$fuzz_seconds" != 0 ]; then tools/fuzz.sh "$fuzz_seconds"; fi
