#!/usr/bin/env bash
# Runs clang-tidy with the repository's .clang-tidy (a small set of bug and
# copy checks, each justified there) over the C++ sources of the product:
# framework/, layers/, codec/ and apps/. CUDA (.cu) files are left out.
#
#   tools/tidy.sh                 # every product source; exit 1 on any warning
#   tools/tidy.sh framework/src/net.cpp codec/src/rans.cpp    # these files only
#
# It configures build-tidy/ for the compile commands (no build needed).
# Takes about a minute a file on two cores for the largest ones.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
command -v clang-tidy >/dev/null || { echo "tidy.sh: clang-tidy not found (apt-get install clang-tidy)" >&2; exit 3; }
cmake -S . -B build-tidy -G Ninja -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DPLEXUS_BUILD_TESTS=OFF >/dev/null
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files -- 'framework/*.cpp' 'layers/*.cpp' 'codec/*.cpp' 'apps/*.cpp')
fi
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "tidy.sh: no such file: $f" >&2; exit 2; }
done
printf '%s\0' "${files[@]}" |
  xargs -0 -n 1 -P "$(nproc)" clang-tidy -p build-tidy --quiet --use-color=false 2>/dev/null | tee build-tidy/tidy.log
# A header's warning is printed once for each file that includes it: count each once.
warnings=$( (grep 'warning:' build-tidy/tidy.log || true) | sort -u | wc -l)
if [ "$warnings" != 0 ]; then echo "tidy.sh: $warnings warnings (build-tidy/tidy.log)" >&2; exit 1; fi
echo "tidy.sh: no warnings in ${#files[@]} files"
