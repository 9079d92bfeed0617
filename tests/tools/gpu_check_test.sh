#!/usr/bin/env bash
# tools/gpu-check.sh's own logic, with stand-ins for the GPU, the sanitizer
# and the test binaries (no GPU needed): unknown phases and bad shards are
# refused (exit 2, naming them); a phase without a build folder is refused;
# the memcheck phase runs every binary that has CUDA tests under memcheck,
# passes GoogleTest's shard to it with MEMCHECK_SHARD (own log), counts a
# binary with memcheck errors as a failure, and the summary names the
# phases and the shard that did not run; a shard given without the memcheck
# phase is reported, and one inherited from the caller's environment does
# not reach an unsharded run.
set -euo pipefail
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/bin" "$work/build/tests"
cat > "$work/bin/nvidia-smi" <<'STANDIN'
#!/usr/bin/env bash
case "$*" in
  *--list-gpus*) echo "GPU 0: stand-in" ;;
  *) echo "stand-in GPU, 1.0" ;;
esac
STANDIN
# compute-sanitizer --tool memcheck --error-exitcode 99 BINARY ARGS...: runs
# the binary; a binary that prints "memory error" gets one error and 99.
cat > "$work/bin/compute-sanitizer" <<'STANDIN'
#!/usr/bin/env bash
shift 4
output=$("$@")
echo "$output"
if grep -q "memory error" <<< "$output"; then
  echo "========= ERROR SUMMARY: 1 error"; exit 99
fi
echo "========= ERROR SUMMARY: 0 errors"
STANDIN
# Test binaries: cuda_a and cuda_b have a *Cuda* test, cpu_only has none.
write_binary() {
  local name=$1 tests=$2 message=$3
  cat > "$work/build/tests/$name" <<STANDIN
#!/usr/bin/env bash
if [ "\$1" = "--gtest_list_tests" ]; then
  printf 'Suite.\n'
  for t in $tests; do printf '  %s\n' "\$t"; done
  exit 0
fi
echo "$name ran, shard \${GTEST_SHARD_INDEX:-none} of \${GTEST_TOTAL_SHARDS:-none}; $message"
STANDIN
  chmod +x "$work/build/tests/$name"
}
write_binary cuda_a_test "AddsCuda" "fine"
write_binary cuda_b_test "MultipliesCuda" "fine"
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
  "SUMMARY: gpu-check PASSED (phases run: memcheck; not run: build ctest mma-sync plugins)"
if grep -q cpu_only_test "$work/out.txt"; then echo "a binary without CUDA tests ran under memcheck"; exit 1; fi
grep -qF "cuda_a_test ran, shard none of none" "$work/logs/memcheck.log" ||
  { echo "memcheck.log lacks the unsharded run"; exit 1; }

run PHASES=memcheck MEMCHECK_SHARD=1/3
check "shard 1/3" 0 "SUMMARY: memcheck (shard 1 of 3 of the CUDA tests): 2 binaries, 0 with errors" \
  "(memcheck: shard 1 of 3 only)"
for name in cuda_a_test cuda_b_test; do
  grep -qF "$name ran, shard 1 of 3" "$work/logs/memcheck-shard1-of-3.log" ||
    { echo "$name did not get shard 1 of 3"; cat "$work/logs/memcheck-shard1-of-3.log"; exit 1; }
done

write_binary cuda_b_test "MultipliesCuda" "memory error"
run PHASES=memcheck MEMCHECK_SHARD=0/2
check "memcheck error" 1 "cuda_b_test: rc=99" "SUMMARY: memcheck (shard 0 of 2 of the CUDA tests): 2 binaries, 1 with errors" \
  "SUMMARY: gpu-check FAILED"
echo "gpu-check.sh: phases, shards and memcheck results as expected"
