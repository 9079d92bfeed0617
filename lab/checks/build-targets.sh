# Sourced by the lab's GPU scripts:
#   source lab/checks/build-targets.sh
#   build_targets LOGS BUILD TARGET...
#   run_gtest LOGS BUILD TEST [FILTER]
# Configures BUILD (Release, Ninja, CUDA architectures $CUDA_ARCH or the
# local GPU's) and builds the targets, logging to LOGS/build.log. On failure
# prints the log's end and "SUMMARY: build FAILED", and exits 1.
build_targets() {
  local logs=$1 build=$2
  shift 2
  if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-native}" &&
         cmake --build "$build" -j "$(nproc)" --target "$@"; } > "$logs/build.log" 2>&1; then
    tail -40 "$logs/build.log"
    echo "SUMMARY: build FAILED"
    exit 1
  fi
}

# Runs BUILD/tests/TEST (its cases matching the gtest FILTER, default all)
# into LOGS/TEST.log and prints its PASSED line, or FAILED and the
# failures; returns 1 when it failed.
run_gtest() {
  local logs=$1 build=$2 test=$3 filter=${4:-*}
  if "$build/tests/$test" --gtest_brief=1 --gtest_filter="$filter" > "$logs/$test.log" 2>&1; then
    echo "$test: $(grep -E '^\[  PASSED' "$logs/$test.log")"
  else
    echo "$test: FAILED"
    grep -E "FAILED|Failure|error" "$logs/$test.log" | head -20
    return 1
  fi
}
