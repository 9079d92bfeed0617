#!/usr/bin/env bash
# Formats the tracked C, C++ and CUDA sources with clang-format and the
# repository's .clang-format (Google's style at 120 columns).
#
#   tools/format.sh            # rewrite the files in place
#   tools/format.sh --check    # list the files that are not formatted; exit 1 if any
#
# The test suite runs the check (Style.ClangFormat). Debian 12's clang-format
# (14) is the reference: another version may format a few lines differently.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=fix
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "format.sh: unknown argument '$1' (use --check, or nothing to format in place)" >&2; exit 2 ;;
esac
command -v clang-format >/dev/null || { echo "format.sh: clang-format not found (apt-get install clang-format)" >&2; exit 77; }
mapfile -t files < <(git ls-files -- '*.c' '*.h' '*.cpp' '*.cu' '*.cuh')
if [ "$mode" = fix ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
unformatted=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
done
if [ ${#unformatted[@]} -gt 0 ]; then
  echo "format.sh: ${#unformatted[@]} of ${#files[@]} files are not formatted (run tools/format.sh):" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  exit 1
fi
echo "format.sh: all ${#files[@]} files formatted"
