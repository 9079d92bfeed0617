#!/usr/bin/env bash
# Builds what the sparse_conv scripts need, in one go: Plexus (the library
# and plexus-ae) in PLEXUS_BUILD unless it is built there already, installed
# to <work>/plexus, and this plugin against that install in <work>/plugin.
# Prints the two paths the other scripts use:
#   PLEXUS_AE=<work>/plexus/bin/plexus-ae
#   SPARSE_CONV_PLUGIN=<work>/plugin/libsparse_conv.so
#
# usage: build-plugin.sh WORK_DIR [extra cmake args for both builds, e.g. -DCMAKE_CUDA_ARCHITECTURES=90]
# env:   PLEXUS_BUILD  a Plexus build folder (default: <repo>/build)
#        JOBS          parallel build jobs (default: every core)
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 WORK_DIR [cmake args...]" >&2; exit 2; }
work=$(mkdir -p "$1" && cd "$1" && pwd)
shift
plugin_dir=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$plugin_dir/../../.." && pwd)
build=${PLEXUS_BUILD:-$repo/build}
jobs=${JOBS:-$(nproc)}
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)

if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@" > "$work/plexus-configure.log" ||
    { cat "$work/plexus-configure.log"; exit 1; }
fi
cmake --build "$build" --target plexus plexus-ae -j "$jobs" > "$work/plexus-build.log" ||
  { tail -40 "$work/plexus-build.log"; exit 1; }
cmake --install "$build" --prefix "$work/plexus" > "$work/plexus-install.log" 2>&1 ||
  { cat "$work/plexus-install.log"; exit 1; }
cmake -S "$plugin_dir" -B "$work/plugin" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/plexus" -DSPARSE_CONV_BUILD_TESTS=OFF "$@" > "$work/plugin-configure.log" ||
  { cat "$work/plugin-configure.log"; exit 1; }
cmake --build "$work/plugin" -j "$jobs" > "$work/plugin-build.log" || { tail -40 "$work/plugin-build.log"; exit 1; }
echo "PLEXUS_AE=$work/plexus/bin/plexus-ae"
echo "SPARSE_CONV_PLUGIN=$work/plugin/libsparse_conv.so"
