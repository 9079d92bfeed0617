#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/) in build-fuzz/ with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer, CPU only, and runs every
# fuzzer for SECONDS (default 60) on its committed seed corpus.
#
#   tools/fuzz.sh            # 60 s per fuzzer
#   tools/fuzz.sh 3600       # a long run: an hour per fuzzer
#
# A long run of one fuzzer by hand, with more memory and all cores:
#   build-fuzz/fuzz/bitstream_fuzzer -max_total_time=3600 -jobs=8 -workers=8 \
#       build-fuzz/fuzz/bitstream_fuzzer-corpus tests/fuzz/corpus/bitstream_fuzzer
# Or a fixed number of executions (the decoder's acceptance run is 1,000,000):
#   build-fuzz/fuzz/bitstream_fuzzer -runs=1000000 build-fuzz/fuzz/bitstream_fuzzer-corpus tests/fuzz/corpus/bitstream_fuzzer
# A crash leaves crash-<hash> in the working folder; replay it with
#   build-fuzz/fuzz/bitstream_fuzzer crash-<hash>
# Fresh seeds for the bitstream fuzzer (valid files for its built-in model):
#   PLEXUS_FUZZ_WRITE_SEEDS=tests/fuzz/corpus/bitstream_fuzzer build-fuzz/fuzz/bitstream_fuzzer -runs=0
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
command -v clang++ >/dev/null || { echo "tools/fuzz.sh: clang++ not found (Debian: apt-get install clang)" >&2; exit 1; }
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DPLEXUS_CUDA=OFF -DPLEXUS_BUILD_TESTS=OFF -DPLEXUS_FUZZ=ON -DPLEXUS_FUZZ_SECONDS="$seconds"
fuzzers=$(cd tests/fuzz/corpus && ls)
# shellcheck disable=SC2086
cmake --build build-fuzz --target $fuzzers
cd build-fuzz
ctest --output-on-failure -L fuzz
