#!/usr/bin/env bash
# Configures and builds Plexus into build/ (executables in build/bin/).
# Extra arguments go to CMake's configure step, e.g. -DPLEXUS_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake -S . -B build -G Ninja "$@"
cmake --build build -j "$jobs"
