#!/usr/bin/env bash
# tools/train-family.sh and tools/train-variable-rate.sh refuse bad
# arguments before training: each case must exit 2 with a message naming
# the culprit.
# Usage: training_scripts_test.sh SOURCE_DIR
set -uo pipefail
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/images"
failures=0
expect() {  # expect SCRIPT MESSAGE [ARGS...]: exit 2 and MESSAGE on stderr
  local script=$1 message=$2
  shift 2
  local output status
  output=$(PLEXUS_AE=$work/missing-plexus-ae bash "$source_dir/tools/$script" "$@" 2>&1)
  status=$?
  if [ "$status" -ne 2 ] || [[ $output != *"$message"* ]]; then
    echo "FAIL: $script $*: exit $status, wanted 2 and '$message'; got: $output"
    failures=$((failures + 1))
  fi
}
for script in train-family.sh train-variable-rate.sh; do
  expect "$script" "usage: " "$work/images"
  expect "$script" "training folder '$work/nowhere' does not exist" "$work/nowhere" 10
  expect "$script" "SECONDS must be a number, got 'ten'" "$work/images" ten
  expect "$script" "'$work/missing-plexus-ae' is not built" "$work/images" 10
done
[ "$failures" -eq 0 ] && echo "training_scripts_test: all cases refused as expected"
exit $((failures > 0))
