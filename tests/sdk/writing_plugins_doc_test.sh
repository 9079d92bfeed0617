#!/usr/bin/env bash
# Checks docs/writing-plugins.md by following it. Every code block under a
# line "File `path`:" is written to $HOME/path, and the shell blocks marked
#   <!-- doc-test: run -->              (always)
#   <!-- doc-test: run if plexus-ae --> (when plexus-ae is installed)
# run in order, as one script, with HOME set to a fresh temporary folder
# that holds ~/src/plexus (links to this build and its data). So the doc's
# own files and commands install Plexus, build the PReLU plugin against the
# installed package, run its gradient-check tests (which load it) and train
# with it.
#
# usage: writing_plugins_doc_test.sh <plexus build dir> <plexus source dir>
set -euo pipefail

build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
doc=$source_dir/docs/writing-plugins.md

work=$(mktemp -d "${TMPDIR:-/tmp}/plexus-doc-test-XXXXXX")
trap 'rm -rf "$work"' EXIT
home=$work/home
mkdir -p "$home/src/plexus"
ln -s "$build_dir" "$home/src/plexus/build"
ln -s "$source_dir/data" "$home/src/plexus/data"
commands=$work/commands.sh
echo 'set -euo pipefail -x' > "$commands"

pending="" target="" in_block=0 files=()
while IFS= read -r line; do
  if (( in_block )); then
    if [[ $line == '```'* ]]; then
      [[ $target == "$commands" && $pending_close == 1 ]] && echo "fi" >> "$commands"
      in_block=0 target="" pending_close=0
    elif [[ -n $target ]]; then
      printf '%s\n' "$line" >> "$target"
    fi
    continue
  fi
  if [[ $line =~ ^File\ \`([^\`]+)\`:$ ]]; then
    pending=file:${BASH_REMATCH[1]}
  elif [[ $line == '<!-- doc-test: run -->' ]]; then
    pending=run
  elif [[ $line == '<!-- doc-test: run if plexus-ae -->' ]]; then
    pending=run-ae
  elif [[ $line == '```'* ]]; then
    in_block=1 pending_close=0
    case $pending in
      file:*)
        target=$home/${pending#file:}
        mkdir -p "$(dirname "$target")"
        : > "$target"
        files+=("${pending#file:}") ;;
      run) target=$commands ;;
      run-ae)
        target=$commands pending_close=1
        echo 'if [[ -x $HOME/plexus/bin/plexus-ae ]]; then' >> "$commands" ;;
      *) target="" ;;
    esac
    pending=""
  elif [[ -n $line ]]; then
    pending=""
  fi
done < "$doc"

echo "files written from the doc: ${files[*]}"
for expected in my_layers/CMakeLists.txt my_layers/prelu.h my_layers/prelu.cpp my_layers/prelu.cu \
                my_layers/plugin.cpp my_layers/prelu_test.cpp my_layers/prelu-model.json; do
  [[ -s $home/$expected ]] || { echo "FAIL: the doc no longer provides $expected"; exit 1; }
done
grep -q 'cmake --install' "$commands" || { echo "FAIL: no install command marked in the doc"; exit 1; }
grep -q 'ctest' "$commands" || { echo "FAIL: no test command marked in the doc"; exit 1; }

echo "running the doc's commands:"
cat "$commands"
(cd "$home" && HOME=$home bash "$commands")
[[ -x $home/plexus/bin/plexus-ae ]] || echo "plexus-ae is not part of this build: the doc's training commands were skipped"
echo "PASS: docs/writing-plugins.md builds, tests and loads its plugin"
