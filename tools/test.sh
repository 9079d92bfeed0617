#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every
# test with CTest. GPU tests skip (with a reason) when no GPU is visible;
# tools/gpu-check.sh runs them on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh "$@"
cd build
ctest --output-on-failure -j "$(nproc)"
