#!/usr/bin/env bash
# A change's GPU checks, on a machine with an NVIDIA GPU, from the
# repository root:
#   bash lab/checks/patch-check.sh CHANGE.patch "TEST..." ["MEMCHECK_TEST..."]
# Copies this tree to BASE (default /tmp/base) with CHANGE.patch reversed,
# builds plexus-bench and the TESTs here (BUILD, default /tmp/b) and
# plexus-bench there (BASE_BUILD, default /tmp/base-build), runs every TEST
# and compute-sanitizer memcheck over the CUDA tests (gtest filter *Cuda*)
# of each MEMCHECK_TEST. Then, for the steps:
#   BUILD=/tmp/b BASE_BUILD=/tmp/base-build bash lab/checks/tree-ab.sh /tmp/base 3
# Logs go to $OUT (default patch-check-logs/).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source lab/checks/build-targets.sh
change=$(realpath "${1:?usage: patch-check.sh CHANGE.patch \"TEST...\" [\"MEMCHECK_TEST...\"]}")
read -r -a tests <<< "${2:?name the tests to run}"
read -r -a memcheck_tests <<< "${3:-}"
logs=${OUT:-patch-check-logs}
build=${BUILD:-/tmp/b}
base=${BASE:-/tmp/base}
base_build=${BASE_BUILD:-/tmp/base-build}
mkdir -p "$logs/base"
logs=$(cd "$logs" && pwd)
SECONDS=0
rm -rf "$base" && mkdir -p "$base"
tar cf - --exclude='./build*' . | tar xf - -C "$base"  # the tree without its build folders
patch -s -d "$base" -R -p1 < "$change" || { echo "SUMMARY: $change does not reverse on this tree"; exit 1; }
build_targets "$logs" "$build" plexus-bench plexus-ae "${tests[@]}"
echo "this tree built (${SECONDS}s)"
(cd "$base" && build_targets "$logs/base" "$base_build" plexus-bench)
echo "the tree without the change built (${SECONDS}s)"
status=0
for test in "${tests[@]}"; do run_gtest "$logs" "$build" "$test" || status=1; done
for test in "${memcheck_tests[@]}"; do
  compute-sanitizer --tool memcheck --error-exitcode 1 "$build/tests/$test" --gtest_filter='*Cuda*' --gtest_brief=1 \
    > "$logs/memcheck-$test.log" 2>&1 || status=1
  echo "memcheck $test: $(grep -E 'ERROR SUMMARY' "$logs/memcheck-$test.log")"
done
[ $status -eq 0 ] && echo "SUMMARY: patch-check passed" || echo "SUMMARY: patch-check FAILED"
exit $status
