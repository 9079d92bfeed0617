#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, from the repository root:
#   tools/gpu-check.sh
# Builds for the local GPU (CMake's native architecture, the benchmarks
# included: -DPLEXUS_BUILD_BENCH=ON), runs the WHOLE test suite and fails if
# any test was skipped (with a GPU nothing may skip), runs every layer's tests
# and gradient checks through the lab's harness (lab/harness/harness.py test grad
# layers: one verdict per layer), the convolution tensor-core tests again with
# the mma.sync kernels (on a Hopper the default is wgmma), then
# compute-sanitizer memcheck over every CUDA test, builds and tests the
# example plugins (examples/plugins/*) against an installed Plexus, and
# prints a summary. memcheck's reports of NCCL probing its own kernels for
# code for this GPU (an error NCCL ignores) are counted apart, not as errors.
# Logs go to $OUT (default gpu-check-logs/); BUILD names the build folder
# (default build-gpu). KODAK names the folder of the 24 full-size Kodak
# images (kodim01.png .. kodim24.png, r0k.us/graphics/kodak): the
# channel-conditional codec's cross-device test runs over every one of them,
# and skips (failing this check) without it. Tools.KodakCrops needs
# ImageMagick (convert, identify; Debian: imagemagick) and likewise skips,
# failing this check, without it.
# PHASES picks the parts to run, in this order (default all of them):
#   PHASES="build ctest layers mma-sync memcheck plugins"
# e.g. PHASES="memcheck" after a fix, on a build folder an earlier run made.
# The check passes only when every phase passes; with some phases left out
# the summary says which ran. MEMCHECK_JOBS (default 4 a GPU) test binaries
# run under memcheck at once, spread over the visible GPUs: the K-th binary
# sees them all, GPU K mod G first (so tests that need two GPUs still have
# them, and device 0 of each binary takes turns). MEMCHECK_SHARD=K/N (0 <= K < N)
# runs only shard K of N of every binary's CUDA tests under memcheck
# (GoogleTest's sharding), so that memcheck over the whole suite can be
# split into N shorter runs on one build, e.g.
#   PHASES="build ctest layers mma-sync" tools/gpu-check.sh
#   PHASES=memcheck MEMCHECK_SHARD=0/3 tools/gpu-check.sh   # then 1/3, 2/3
# A binary with fewer CUDA tests than K+1 has none in shard K and is not run
# there (the summary counts it). With a shard the summary says which one
# ran: the check covers all of memcheck only when every shard has passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0  # data-parallel tests: NVLink multicast stays off
logs=${OUT:-gpu-check-logs}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
build=${BUILD:-build-gpu}
jobs=$(nproc)
all_phases="build ctest layers mma-sync memcheck plugins"
phases=${PHASES:-$all_phases}
for phase in $phases; do
  [[ " $all_phases " == *" $phase "* ]] || { echo "gpu-check: unknown phase '$phase' (phases: $all_phases)" >&2; exit 2; }
done
runs() { [[ " $phases " == *" $1 "* ]]; }
shard_index="" shard_count=""
if [ -n "${MEMCHECK_SHARD:-}" ]; then
  if [[ $MEMCHECK_SHARD =~ ^([0-9]+)/([0-9]+)$ ]] && ((10#${BASH_REMATCH[1]} < 10#${BASH_REMATCH[2]})); then
    shard_index=$((10#${BASH_REMATCH[1]})) shard_count=$((10#${BASH_REMATCH[2]}))
  else
    echo "gpu-check: MEMCHECK_SHARD must be K/N with 0 <= K < N, got '$MEMCHECK_SHARD'" >&2
    exit 2
  fi
  runs memcheck || echo "gpu-check: MEMCHECK_SHARD=$MEMCHECK_SHARD has no effect: PHASES has no memcheck" >&2
fi
summary=()  # the SUMMARY lines, in phase order
failed=0

run_build() {
  echo "== configure + build"
  if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=native \
           -DPLEXUS_BUILD_BENCH=ON &&
         cmake --build "$build" -j "$jobs"; } > "$logs/build.log" 2>&1; then
    tail -60 "$logs/build.log"
    echo "SUMMARY: build FAILED"
    exit 1
  fi
  # Data-parallel training through NCCL needs CMake to find it (ctest below).
  grep -E "^-- NCCL" "$logs/build.log" | head -1 > "$logs/nccl.txt"
}

run_ctest() {
  echo "== ctest"
  if [ -n "${KODAK:-}" ]; then
    PLEXUS_KODAK_DIR=$(realpath "$KODAK")
    export PLEXUS_KODAK_DIR
  fi
  (cd "$build" && ctest -j 8 --output-on-failure --timeout 900) > "$logs/ctest.log" 2>&1
  local rc=$?
  local tests_line
  tests_line=$(grep -E "tests passed" "$logs/ctest.log" | tail -1)
  # Tests named TwoGpu* need two GPUs: with one visible (CUDA_VISIBLE_DEVICES
  # counts, as for the tests themselves) they may skip.
  local gpus skipped
  gpus=$(visible_gpus | wc -l)
  skipped=$(grep -E "\(Skipped\)" "$logs/ctest.log" | { if [ "$gpus" -lt 2 ]; then grep -v "\.TwoGpu"; else cat; fi; } | wc -l)
  grep -E "\(Failed\)|\(SEGFAULT\)|\(Timeout\)|\(Subprocess aborted\)|\*\*\*Exception" "$logs/ctest.log" | head -40
  summary+=("ctest: ${tests_line:-no result} (rc=$rc); skipped: $skipped$([ "$gpus" -lt 2 ] && echo " (the two-GPU tests not counted: one GPU visible)")")
  # Data-parallel training through NCCL at world size 1 (tests/distributed/
  # nccl_communicator_test.cpp and the --gpus tests of plexus-ae); they skip,
  # and so fail this check, when CMake did not find NCCL. Among them the
  # torchrun-style launches (plexus-ae ranks started with RANK, LOCAL_RANK,
  # WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT, NCCL's id through the
  # TCP rendezvous): a world of one on one GPU, two ranks on two GPUs.
  local nccl_tests nccl_total torchrun_tests torchrun_total
  nccl_tests=$(grep -E "(NcclCommunicator|PlexusAeDataParallel)\." "$logs/ctest.log" | grep -cE "Passed")
  nccl_total=$(grep -E "(NcclCommunicator|PlexusAeDataParallel)\." "$logs/ctest.log" | grep -cE "Test +#")
  summary+=("data-parallel (NCCL): $nccl_tests of $nccl_total passed; $(cat "$logs/nccl.txt" 2>/dev/null || echo "NCCL not reported by CMake")")
  torchrun_tests=$(grep -E "(PlexusAeDataParallel\..*Torchrun|NcclCommunicator\..*TcpRendezvous)" "$logs/ctest.log" | grep -cE "Passed")
  torchrun_total=$(grep -E "(PlexusAeDataParallel\..*Torchrun|NcclCommunicator\..*TcpRendezvous)" "$logs/ctest.log" | grep -cE "Test +#")
  summary+=("torchrun-style launches (NCCL's id through the TCP rendezvous): $torchrun_tests of $torchrun_total passed")
  if [ $rc -ne 0 ] || [ "$skipped" -ne 0 ]; then failed=1; fi
}

# harness LABEL ARGUMENTS...: lab/harness/harness.py over this build (no build of its
# own), logs in $logs/LABEL/ and its output in $logs/LABEL.log; prints its
# per-binary lines and adds its SUMMARY line, under LABEL, to the summary.
harness() {
  local label=$1
  shift
  python3 lab/harness/harness.py "$@" --no-build --build "$build" --logs "$logs/$label" > "$logs/$label.log" 2>&1
  local rc=$?
  grep -vE "^SUMMARY: " "$logs/$label.log"
  local line
  line=$(grep -E "^SUMMARY: " "$logs/$label.log" | tail -1)
  summary+=("$label: ${line#SUMMARY: }$([ $rc -eq 0 ] || echo " FAILED (exit $rc)")")
  [ $rc -eq 0 ] || failed=1
}

# Every registered layer: its tests and its gradient checks (CPU and CUDA),
# one verdict per layer; no CUDA test may skip.
run_layers() {
  echo "== every layer's tests and gradient checks (lab/harness/harness.py test grad layers)"
  harness layers test grad layers --timeout 1800
}

# On a Hopper the convolutions' tap-major passes run wgmma kernels; every
# other GPU runs the mma.sync ones. Their tensor-core tests again, with the
# mma.sync kernels forced, so both paths are checked on this GPU.
run_mma_sync() {
  echo "== convolution tensor-core tests with the mma.sync kernels (PLEXUS_CONV_WGMMA=0)"
  harness mma-sync test Conv2d ConvTranspose2d --filter '*TensorCore*' --env PLEXUS_CONV_WGMMA=0 --timeout 600
}

# The visible GPUs' indices, one per line: CUDA_VISIBLE_DEVICES's entries
# when it is set, else 0 .. (nvidia-smi's count - 1).
visible_gpus() {
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES"
  else
    seq 0 $(($(nvidia-smi --list-gpus | wc -l) - 1))
  fi
}

# rotated K GPU...: the GPUs given, comma-separated, starting from the
# (K mod count)-th; nothing when none is given.
rotated() {
  local k=$1
  shift
  local i list=""
  for ((i = 0; i < $#; ++i)); do
    local at=$(((k + i) % $# + 1))
    list+=${list:+,}${!at}
  done
  echo "$list"
}

# memcheck over the given test binaries' *Cuda* tests, MEMCHECK_JOBS at a
# time (default 4 a GPU), the K-th (from 0) with CUDA_VISIBLE_DEVICES the
# visible GPUs rotated by K;
# prints one line per binary (LABEL names its group) in the order
# given, appends every report to memcheck.log (memcheck-shardK-of-N.log
# with a shard), and adds the counts to memcheck_runs, memcheck_errors and
# memcheck_nccl_probes. A binary whose tests passed and whose every report
# is one of NCCL's kernel probes (nccl_probe_reports) counts as clean.
memcheck_runs=0
memcheck_errors=0
memcheck_nccl_probes=0
memcheck_name=memcheck${shard_count:+-shard$shard_index-of-$shard_count}  # its log and folder of reports
memcheck_log=$logs/$memcheck_name.log
memcheck_binaries() {
  local label=$1
  shift
  local dir=$logs/$memcheck_name
  mkdir -p "$dir"
  local gpus k
  mapfile -t gpus < <(visible_gpus)
  # Lines "devices", "binary" for xargs to take two at a time. GoogleTest
  # runs only shard GTEST_SHARD_INDEX of GTEST_TOTAL_SHARDS of the selected tests.
  for ((k = 1; k <= $#; ++k)); do printf '%s\n%s\n' "$(rotated $((k - 1)) "${gpus[@]}")" "${!k}"; done |
    xargs -d '\n' -n 2 -P "${MEMCHECK_JOBS:-$((4 * (${#gpus[@]} > 0 ? ${#gpus[@]} : 1)))}" bash -c \
    'out="$1/$(basename "$5")"
     if [ -n "$2" ]; then export GTEST_TOTAL_SHARDS=$2 GTEST_SHARD_INDEX=$3; else unset GTEST_TOTAL_SHARDS GTEST_SHARD_INDEX; fi
     if [ -n "$4" ]; then export CUDA_VISIBLE_DEVICES=$4; fi
     compute-sanitizer --tool memcheck --error-exitcode 99 "$5" --gtest_filter="*Cuda*" > "$out.log" 2>&1
     echo $? > "$out.rc"' \
    _ "$dir" "$shard_count" "$shard_index"
  local binary name rc note probes
  for binary in "$@"; do
    name=$(basename "$binary")
    rc=$(cat "$dir/$name.rc" 2>/dev/null || echo 1)
    cat "$dir/$name.log" >> "$memcheck_log"
    note=""
    probes=$(nccl_probe_reports "$dir/$name.log")
    if [ "$rc" -eq 99 ] && only_nccl_probes "$dir/$name.log" "$probes"; then
      rc=0 note=" (all $probes of them NCCL's probes of its own kernels, not counted)"
      memcheck_nccl_probes=$((memcheck_nccl_probes + probes))
    fi
    echo "$name$label: rc=$rc $(grep -E "ERROR SUMMARY" "$dir/$name.log" | tail -1)$note"
    memcheck_runs=$((memcheck_runs + 1))
    if [ "$rc" -ne 0 ]; then memcheck_errors=$((memcheck_errors + 1)); fi
  done
}

# When NCCL sets up a communicator it reads the attributes of every kernel
# it was built with (cudaFuncGetAttributes) and ignores the error for those
# that have no code for this GPU; memcheck reports each of those errors
# (cudaErrorNoKernelImageForDevice). They are not memory errors. The number
# of them in a memcheck log: the reports of that error on that call whose
# first frame below the driver is in libnccl.
nccl_probe_reports() {
  awk '/Program hit cudaErrorNoKernelImageForDevice .* cudaFuncGetAttributes/ { probe = 1; next }
       probe && /Host Frame:/ && !/ in libcuda\.so/ { if (/ in libnccl\.so/) n++; probe = 0 }
       END { print n + 0 }' "$1"
}

# only_nccl_probes LOG PROBES: whether the PROBES NCCL probes
# (nccl_probe_reports) are all of memcheck log LOG's errors and its tests
# passed.
only_nccl_probes() {
  local errors
  errors=$(grep -oE "ERROR SUMMARY: [0-9]+ error" "$1" | tail -1 | grep -oE "[0-9]+")
  [ "${errors:-0}" -gt 0 ] && [ "$2" -eq "$errors" ] &&
    grep -q "^\[  PASSED  \]" "$1" && ! grep -q "^\[  FAILED  \]" "$1"
}

# The test binaries in a folder that have *Cuda* tests, one a line:
# "run BINARY" when some of them fall in this run's shard, else "empty BINARY".
# GoogleTest gives the K-th (from 0) selected test to shard K mod N, so a
# binary with at most K of them has none in shard K (and memcheck would fail
# it for making no CUDA call).
cuda_test_binaries() {
  local binary count
  for binary in "$1"/*_test; do
    [ -x "$binary" ] || continue
    count=$("$binary" --gtest_list_tests --gtest_filter='*Cuda*' 2>/dev/null | grep -c '^  ')
    if [ "$count" -gt "${shard_index:-0}" ]; then
      echo "run $binary"
    elif [ "$count" -gt 0 ]; then
      echo "empty $binary"
    fi
  done
}

# memcheck_folder LABEL FOLDER: memcheck over the folder's binaries with CUDA
# tests in this shard; those with none in it are counted in memcheck_empty.
memcheck_empty=0
memcheck_folder() {
  local line binaries=()
  while read -r line; do
    case "$line" in
      run\ *) binaries+=("${line#run }") ;;
      empty\ *) memcheck_empty=$((memcheck_empty + 1)) ;;
    esac
  done < <(cuda_test_binaries "$2")
  [ ${#binaries[@]} -eq 0 ] || memcheck_binaries "$1" "${binaries[@]}"
}

run_memcheck() {
  echo "== compute-sanitizer memcheck over the CUDA tests${shard_count:+ (shard $shard_index of $shard_count)}"
  : > "$memcheck_log"
  memcheck_folder "" "$build/tests"
}

# The out-of-tree example plugins, each built against an installed Plexus
# (their CUDA tests under memcheck too, when that phase runs).
run_plugins() {
  echo "== example plugins"
  local prefix installed=0 plugin log any=0
  prefix=$(realpath -m "$build")/install  # BUILD may be relative or absolute
  for plugin in simplified_gdn sparse_conv; do
    [ -f examples/plugins/$plugin/CMakeLists.txt ] && [ -f cmake/PlexusInstall.cmake ] || continue
    any=1
    if [ $installed -eq 0 ]; then
      cmake --install "$build" --prefix "$prefix" > "$logs/plugin-install.log" 2>&1 && installed=1
    fi
    log=$logs/plugin-$plugin.log
    if [ $installed -eq 1 ] &&
       cmake -S examples/plugins/$plugin -B "$build/plugin-$plugin" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
         -DCMAKE_CUDA_ARCHITECTURES=native > "$log" 2>&1 &&
       cmake --build "$build/plugin-$plugin" -j "$jobs" >> "$log" 2>&1 &&
       (cd "$build/plugin-$plugin" && ctest --output-on-failure) >> "$log" 2>&1; then
      local plugin_skipped
      plugin_skipped=$(grep -cE "\(Skipped\)" "$log")
      summary+=("plugin $plugin: $(grep -E "tests passed" "$log" | tail -1); skipped: $plugin_skipped")
      [ "$plugin_skipped" -eq 0 ] || failed=1
      if runs memcheck; then memcheck_folder " ($plugin)" "$build/plugin-$plugin"; fi
    else
      tail -40 "$log" 2>/dev/null || tail -40 "$logs/plugin-install.log"
      summary+=("plugin $plugin: FAILED (see $(basename "$log"))")
      failed=1
    fi
  done
  [ $any -eq 1 ] || summary+=("example plugins: not present")
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
if runs build; then
  run_build
elif [ ! -d "$build/tests" ]; then
  echo "gpu-check: no build in $build (run the build phase first)" >&2
  exit 2
fi
runs ctest && run_ctest
runs layers && run_layers
runs mma-sync && run_mma_sync
runs memcheck && run_memcheck
runs plugins && run_plugins
if runs memcheck; then
  memcheck_line="memcheck${shard_count:+ (shard $shard_index of $shard_count of the CUDA tests)}:"
  memcheck_line+=" $memcheck_runs binaries, $memcheck_errors with errors"
  ((memcheck_empty == 0)) || memcheck_line+="; $memcheck_empty with no CUDA test in this shard, not run"
  ((memcheck_nccl_probes == 0)) ||
    memcheck_line+=" ($memcheck_nccl_probes reports of NCCL probing its own kernels not counted)"
  summary+=("$memcheck_line")
  [ $memcheck_errors -eq 0 ] || failed=1
fi

echo
for line in "${summary[@]}"; do echo "SUMMARY: $line"; done
ran=""
if [ "$phases" != "$all_phases" ]; then
  not_run=$(for p in $all_phases; do runs "$p" || echo "$p"; done | paste -sd ' ')
  ran=" (phases run: $phases; not run: ${not_run:-none})"
fi
if runs memcheck && [ -n "$shard_count" ]; then ran+=" (memcheck: shard $shard_index of $shard_count only)"; fi
if [ $failed -ne 0 ]; then
  echo "SUMMARY: gpu-check FAILED$ran"
  exit 1
fi
echo "SUMMARY: gpu-check PASSED$ran"
