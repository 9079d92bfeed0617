#!/usr/bin/env bash
# tools/gpu-check.sh's own logic, with stand-ins for the GPU, the sanitizer
# and the test binaries (no GPU needed): unknown phases and bad shards are
# refused (exit 2, naming them); a phase without a build folder is refused;
# the memcheck phase runs every binary that has CUDA tests under memcheck,
# passes GoogleTest's shard to it with MEMCHECK_SHARD (own log) and leaves
# out, counted, a binary with no CUDA test in that shard; counts a
# binary with memcheck errors as a failure, and the summary names the
# phases and the shard that did not run; a shard given without the memcheck
# phase is reported, and one inherited from the caller's environment does
# not reach an unsharded run; NCCL's reports of probing its own kernels are
# counted apart only when they are a passing binary's only reports; the
# binaries are spread over the visible GPUs (CUDA_VISIBLE_DEVICES rotated);
# the ctest phase lets the two-GPU tests skip only when one GPU is visible
# (CUDA_VISIBLE_DEVICES counts) and fails on any other skip; the layers phase
# runs lab/harness/harness.py's test and grad over every layer's test binary (a
# skipped CUDA test fails it), and the mma-sync phase runs the convolutions'
# tensor-core tests through it with PLEXUS_CONV_WGMMA=0.
set -euo pipefail
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/bin" "$work/build/tests"
cat > "$work/bin/nvidia-smi" <<'STANDIN'
#!/usr/bin/env bash
case "$*" in
  *--list-gpus*) for ((i = 0; i < ${STANDIN_GPUS:-1}; ++i)); do echo "GPU $i: stand-in"; done ;;
  *) echo "stand-in GPU, 1.0" ;;
esac
STANDIN
# compute-sanitizer --tool memcheck --error-exitcode 99 BINARY ARGS...: runs
# the binary, fails (255) when it ran no test, and reports one error (and
# exits 99) for each of these words in
# its output: "memory error"; "nccl probe", a failed cudaFuncGetAttributes
# called from libnccl (as NCCL's kernel set-up makes them); "own probe", the
# same error called from libplexus.
cat > "$work/bin/compute-sanitizer" <<'STANDIN'
#!/usr/bin/env bash
shift 4
output=$("$@")
echo "$output"
if grep -q "Running 0 tests" <<< "$output"; then  # as memcheck ends a run that made no CUDA call
  echo "========= Error: Target application terminated before first instrumented API call"
  exit 255
fi
errors=0
probe() {  # a report of cudaFuncGetAttributes failing, called from library $1
  printf '%s\n' '========= Program hit cudaErrorNoKernelImageForDevice (error 209) due to "no kernel image is available for execution on the device" on CUDA API call to cudaFuncGetAttributes.' \
    '=========     Saved host backtrace up to driver entry point at error' \
    '=========         Host Frame:  [0x4cb045] in libcuda.so.1' \
    "=========         Host Frame:  [0x1babc0] in $1" \
    '=========         Host Frame:  [0x9cb83] in libc.so.6' '========= '
  errors=$((errors + 1))
}
if grep -q "nccl probe" <<< "$output"; then probe libnccl.so.2; probe libnccl.so.2; fi
if grep -q "own probe" <<< "$output"; then probe libplexus.so; fi
if grep -q "memory error" <<< "$output"; then
  echo "========= Invalid __global__ read of size 4 bytes"; errors=$((errors + 1))
fi
echo "========= ERROR SUMMARY: $errors error$([ $errors -eq 1 ] || echo s)"
[ $errors -eq 0 ] || exit 99
STANDIN
# Test binaries: cuda_a and cuda_b have two *Cuda* tests, cpu_only has none.
write_binary() {
  local name=$1 tests=$2 message=$3
  cat > "$work/build/tests/$name" <<STANDIN
#!/usr/bin/env bash
if [ "\$1" = "--gtest_list_tests" ]; then
  printf 'Suite.\n'
  for t in $tests; do printf '  %s\n' "\$t"; done
  exit 0
fi
tests=($tests)  # the K-th runs in shard K mod N, as GoogleTest shards
if [ "\${GTEST_SHARD_INDEX:-0}" -ge "\${#tests[@]}" ]; then
  echo "[==========] Running 0 tests"
  exit 0
fi
echo "$name ran, shard \${GTEST_SHARD_INDEX:-none} of \${GTEST_TOTAL_SHARDS:-none}, GPUs \${CUDA_VISIBLE_DEVICES:-unset}; $message"
case "$message" in
  *"test failure"*) echo "[  FAILED  ] 1 test, listed below:"; exit 1 ;;
  *) echo "[  PASSED  ] 1 test." ;;
esac
STANDIN
  chmod +x "$work/build/tests/$name"
}
write_binary cuda_a_test "AddsCuda SubtractsCuda" "fine"
write_binary cuda_b_test "MultipliesCuda DividesCuda" "fine"
write_binary cpu_only_test "" "fine"
chmod +x "$work/bin/"*

check() {  # check NAME EXPECTED_RC TEXT... : the last run's exit code and texts in its output
  local name=$1 expected=$2
  shift 2
  [ "$rc" -eq "$expected" ] || { echo "$name: exit $rc, expected $expected"; cat "$work/out.txt"; exit 1; }
  local text
  for text in "$@"; do
    grep -qF -- "$text" "$work/out.txt" || { echo "$name: no '$text' in:"; cat "$work/out.txt"; exit 1; }
  done
}
run() {  # run VAR=VALUE... : gpu-check.sh with the stand-ins, logs in $work/logs
  rc=0
  env PATH="$work/bin:$PATH" OUT="$work/logs" BUILD="$work/build" "$@" \
    bash "$source_dir/tools/gpu-check.sh" > "$work/out.txt" 2>&1 || rc=$?
}

run PHASES="memcheck lint"
check "unknown phase" 2 "unknown phase 'lint'"
for shard in 3/3 1 a/2 1/0 -1/2; do
  run PHASES=memcheck MEMCHECK_SHARD="$shard"
  check "shard $shard" 2 "MEMCHECK_SHARD must be K/N with 0 <= K < N, got '$shard'"
done
run PHASES=memcheck BUILD="$work/no-such-build"
check "no build" 2 "no build in $work/no-such-build"

run PHASES=plugins MEMCHECK_SHARD=0/2 BUILD="$work/no-such-build"
check "shard without memcheck" 2 "MEMCHECK_SHARD=0/2 has no effect: PHASES has no memcheck"

run PHASES=memcheck GTEST_TOTAL_SHARDS=5 GTEST_SHARD_INDEX=4
check "memcheck" 0 "cuda_a_test: rc=0" "cuda_b_test: rc=0" "SUMMARY: memcheck: 2 binaries, 0 with errors" \
  "SUMMARY: gpu-check PASSED (phases run: memcheck; not run: build ctest layers mma-sync plugins)"
if grep -q cpu_only_test "$work/out.txt"; then echo "a binary without CUDA tests ran under memcheck"; exit 1; fi
grep -qF "cuda_a_test ran, shard none of none, GPUs 0;" "$work/logs/memcheck.log" ||
  { echo "memcheck.log lacks the unsharded run on GPU 0"; cat "$work/logs/memcheck.log"; exit 1; }

# Binaries spread over the GPUs, each seeing all of them: the K-th starts from GPU K mod G.
for setting in "STANDIN_GPUS=2:0,1:1,0" "STANDIN_GPUS=1 CUDA_VISIBLE_DEVICES=3,5:3,5:5,3"; do
  IFS=: read -r variables first second <<< "$setting"
  read -r -a variables <<< "$variables"
  run PHASES=memcheck "${variables[@]}"
  check "memcheck on GPUs ($setting)" 0 "SUMMARY: memcheck: 2 binaries, 0 with errors"
  for expected in "cuda_a_test ran, shard none of none, GPUs $first;" "cuda_b_test ran, shard none of none, GPUs $second;"; do
    grep -qF "$expected" "$work/logs/memcheck.log" ||
      { echo "memcheck on GPUs ($setting): no '$expected' in"; cat "$work/logs/memcheck.log"; exit 1; }
  done
done

# cuda_c has one CUDA test: in shard 0 of 3, in none of the others, where it
# is not run (memcheck fails a binary that makes no CUDA call) but counted.
write_binary cuda_c_test "OnlyCuda" "fine"
run PHASES=memcheck MEMCHECK_SHARD=0/3
check "shard 0/3" 0 "SUMMARY: memcheck (shard 0 of 3 of the CUDA tests): 3 binaries, 0 with errors" \
  "cuda_c_test: rc=0"
if grep -q "no CUDA test in this shard" "$work/out.txt"; then echo "shard 0/3: a binary was left out"; exit 1; fi
run PHASES=memcheck MEMCHECK_SHARD=1/3
check "shard 1/3" 0 \
  "SUMMARY: memcheck (shard 1 of 3 of the CUDA tests): 2 binaries, 0 with errors; 1 with no CUDA test in this shard, not run" \
  "(memcheck: shard 1 of 3 only)"
for name in cuda_a_test cuda_b_test; do
  grep -qF "$name ran, shard 1 of 3" "$work/logs/memcheck-shard1-of-3.log" ||
    { echo "$name did not get shard 1 of 3"; cat "$work/logs/memcheck-shard1-of-3.log"; exit 1; }
done
if grep -q cuda_c_test "$work/logs/memcheck-shard1-of-3.log"; then echo "shard 1/3: cuda_c_test ran"; exit 1; fi
rm "$work/build/tests/cuda_c_test"

write_binary cuda_b_test "MultipliesCuda DividesCuda" "memory error"
run PHASES=memcheck MEMCHECK_SHARD=0/2
check "memcheck error" 1 "cuda_b_test: rc=99" "SUMMARY: memcheck (shard 0 of 2 of the CUDA tests): 2 binaries, 1 with errors" \
  "SUMMARY: gpu-check FAILED"
# NCCL's kernel probes are counted apart; the same error from elsewhere, a
# probe beside a memory error, or a probe in a binary whose test failed is not.
write_binary cuda_b_test "MultipliesCuda DividesCuda" "nccl probe"
run PHASES=memcheck
check "nccl probes" 0 "cuda_b_test: rc=0 ========= ERROR SUMMARY: 2 errors (all 2 of them NCCL's probes of its own kernels, not counted)" \
  "SUMMARY: memcheck: 2 binaries, 0 with errors (2 reports of NCCL probing its own kernels not counted)" \
  "SUMMARY: gpu-check PASSED"
for message in "own probe" "nccl probe, memory error" "nccl probe, own probe" "nccl probe, test failure"; do
  write_binary cuda_b_test "MultipliesCuda DividesCuda" "$message"
  run PHASES=memcheck
  check "$message" 1 "cuda_b_test: rc=99" "SUMMARY: memcheck: 2 binaries, 1 with errors" "SUMMARY: gpu-check FAILED"
done
# ctest: a stand-in whose run skips a two-GPU test (and, with STANDIN_SKIP_OTHER, another one).
cat > "$work/bin/ctest" <<'STANDIN'
#!/usr/bin/env bash
echo "100% tests passed, 0 tests failed out of 3"
echo "The following tests did not run:"
echo "	  2 - PlexusAeDataParallel.TwoGpuTrainingMatchesOneGpu (Skipped)"
if [ -n "${STANDIN_SKIP_OTHER:-}" ]; then echo "	  3 - Codec.NeedsKodak (Skipped)"; fi
STANDIN
chmod +x "$work/bin/ctest"
# One GPU visible (on a machine with one, or CUDA_VISIBLE_DEVICES naming one of two): the two-GPU skip is not counted.
for variables in "STANDIN_GPUS=1" "STANDIN_GPUS=2 CUDA_VISIBLE_DEVICES=1"; do
  read -r -a variables <<< "$variables"
  run PHASES=ctest "${variables[@]}"
  check "ctest (${variables[*]})" 0 "(rc=0); skipped: 0 (the two-GPU tests not counted: one GPU visible)" \
    "SUMMARY: gpu-check PASSED (phases run: ctest;"
done
# Two GPUs visible, the two-GPU test skipped: a failure.
run PHASES=ctest STANDIN_GPUS=2
check "ctest (two GPUs)" 1 "(rc=0); skipped: 1" "SUMMARY: gpu-check FAILED"
if grep -q "not counted" "$work/out.txt"; then echo "ctest (two GPUs): the two-GPU skip was not counted"; exit 1; fi
# One GPU, and another test skipped: a failure.
run PHASES=ctest STANDIN_GPUS=1 STANDIN_SKIP_OTHER=1
check "ctest (another skip)" 1 "(rc=0); skipped: 1 (the two-GPU tests not counted: one GPU visible)" \
  "SUMMARY: gpu-check FAILED"

# The layers and mma-sync phases: lab/harness/harness.py over stand-ins of every layer
# test binary (tests/layers/*_test.cpp), each with a forward test, CPU and CUDA
# gradient checks, a parity test and a tensor-core test; STANDIN_SKIP names a
# test that skips. Each appends "binary filter PLEXUS_CONV_WGMMA" to calls.txt.
mkdir -p "$work/layers-build/tests"
for source in "$source_dir"/tests/layers/*_test.cpp; do
  cat > "$work/layers-build/tests/$(basename "$source" .cpp)" <<STANDIN
#!/usr/bin/env bash
tests="Layer.Forward Layer.GradientsCpu Layer.GradientsCuda Layer.ParityCpuCuda Layer.TensorCoreCudaMatches"
if [ "\$1" = "--gtest_list_tests" ]; then
  echo "Layer."
  for t in \$tests; do echo "  \${t#Layer.}"; done
  exit 0
fi
filter=\${1#--gtest_filter=}
echo "\$(basename "\$0") \$filter \${PLEXUS_CONV_WGMMA:-unset}" >> "$work/calls.txt"
for t in \${filter//:/ }; do
  if [ "\$t" = "\${STANDIN_SKIP:-}" ]; then echo "[  SKIPPED ] \$t (0 ms)"; else echo "[       OK ] \$t (0 ms)"; fi
done
echo "[  PASSED  ] tests."
STANDIN
  chmod +x "$work/layers-build/tests/$(basename "$source" .cpp)"
done
layer_binaries=$(python3 "$source_dir/lab/harness/harness.py" list | grep -oE " [a-z0-9_]+_test " | sort -u | wc -l)
: > "$work/calls.txt"
run PHASES=layers BUILD="$work/layers-build"
check "layers" 0 "gdn_test test: passed: 3 of 3 passed" "gdn_test grad: passed: 2 of 2 passed" \
  "SUMMARY: gpu-check PASSED (phases run: layers;"
binaries=$(cut -d' ' -f1 "$work/calls.txt" | sort -u | wc -l)
[ "$binaries" -ge 15 ] && [ "$binaries" -eq "$layer_binaries" ] ||
  { echo "layers: $binaries layer test binaries ran, of $layer_binaries"; cat "$work/out.txt"; exit 1; }
grep -qF "elementwise_test Layer.GradientsCpu:Layer.GradientsCuda unset" "$work/calls.txt" ||
  { echo "layers: elementwise_test's gradient checks did not run"; cat "$work/calls.txt"; exit 1; }
run PHASES=layers BUILD="$work/layers-build" STANDIN_SKIP=Layer.GradientsCuda
check "layers with a skip" 1 "skipped: Layer.GradientsCuda (a test may not skip" "SUMMARY: gpu-check FAILED"
: > "$work/calls.txt"
run PHASES=mma-sync BUILD="$work/layers-build"
check "mma-sync" 0 "SUMMARY: mma-sync: test PLEXUS_CONV_WGMMA=0: 2 of 2 passed" "SUMMARY: gpu-check PASSED"
if [ "$(sort "$work/calls.txt")" != "$(printf '%s\n' "conv2d_test Layer.TensorCoreCudaMatches 0" \
      "conv_transpose2d_test Layer.TensorCoreCudaMatches 0")" ]; then
  echo "mma-sync: not the tensor-core tests of the two convolutions with PLEXUS_CONV_WGMMA=0:"
  cat "$work/calls.txt"
  exit 1
fi
echo "gpu-check.sh: phases, shards, memcheck, ctest, layers and mma-sync results as expected"
