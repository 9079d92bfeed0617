# Sourced by the lab's GPU scripts:
#   source lab/checks/build-targets.sh
#   build_targets LOGS BUILD TARGET...
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
