#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/: model spec + Net, safetensors
# + checkpoint loading, PNG/JPEG decoding, the codec's decoder and its C API, ...) with clang, AddressSanitizer
# and UndefinedBehaviorSanitizer in build-fuzz/ (CPU only), then runs each
# for SECONDS seconds (default 20) from its committed seed corpus.
#
#   tools/fuzz.sh            # the short run CI does (tools/test.sh)
#   tools/fuzz.sh 3600       # an hour per harness
#
# A longer campaign on one harness, keeping what it learns between runs:
#   mkdir -p fuzz-corpus/model_spec
#   build-fuzz/tests/fuzz/model_spec -jobs=4 -workers=4 -max_total_time=36000 \
#       fuzz-corpus/model_spec build-fuzz/seed-corpus/model_spec
# A crash leaves its input under build-fuzz/tests/fuzz/artifacts/<name>/;
# rerun it with build-fuzz/tests/fuzz/<name> <that file>.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
jobs=$(nproc)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DPLEXUS_CUDA=OFF \
  -DPLEXUS_BUILD_TESTS=OFF -DPLEXUS_FUZZ=ON -DPLEXUS_FUZZ_SECONDS="$seconds"
cmake --build build-fuzz --target plexus_fuzzers -j "$jobs"
cd build-fuzz
ctest --output-on-failure -L fuzz -j "$jobs"
