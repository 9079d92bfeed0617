#!/usr/bin/env bash
# The plugin SDK end to end, as a user meets it:
#   1. install the already-built Plexus to a temporary prefix;
#   2. configure and build examples/plugins/simplified_gdn out of tree with
#      nothing but find_package(plexus) pointed at that prefix;
#   3. run the plugin's own tests (gradient checks; CUDA ones skip without a GPU);
#   4. when plexus-ae is installed: a few training steps on the CPU with
#      --plugin and bls2017-sgdn.json on data/train-sample, then an eval;
#      then the same training picking the plugin up from PLEXUS_PLUGIN_PATH.
# Nothing of Plexus is rebuilt.
#
# usage: install_test.sh <plexus build dir> <plexus source dir> [cmake] [ctest]
set -euo pipefail

build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
cmake_command=${3:-cmake}
ctest_command=${4:-ctest}

work=$(mktemp -d "${TMPDIR:-/tmp}/plexus-sdk-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
step() { echo; echo "== $*"; }

step "install Plexus to $prefix"
"$cmake_command" --install "$build_dir" --prefix "$prefix" > "$work/install.log" 2>&1 ||
  { cat "$work/install.log"; echo "FAIL: cmake --install failed; build every target first (cmake --build $build_dir)"; exit 1; }
for file in include/plexus/plugin.h include/plexus/gradcheck.h lib/libplexus.so lib/libplexus_data.so \
            lib/libplexus_train.so \
            lib/cmake/plexus/plexusConfig.cmake lib/cmake/plexus/plexusConfigVersion.cmake \
            lib/cmake/plexus/plexusTargets.cmake lib/cmake/plexus/PlexusPlugin.cmake; do
  [[ -f $prefix/$file ]] || { echo "FAIL: $file was not installed"; exit 1; }
done

generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
step "configure and build the example plugin against the installed package"
plugin_build=$work/simplified_gdn
"$cmake_command" -S "$source_dir/examples/plugins/simplified_gdn" -B "$plugin_build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
grep -q "^plexus_DIR:PATH=$prefix/lib/cmake/plexus$" "$plugin_build/CMakeCache.txt" ||
  { echo "FAIL: find_package(plexus) did not use the installed package"; grep plexus_DIR "$plugin_build/CMakeCache.txt"; exit 1; }
"$cmake_command" --build "$plugin_build" -j 2
plugin=$plugin_build/libsimplified_gdn.so
[[ -f $plugin ]] || { echo "FAIL: $plugin was not built"; exit 1; }

step "the plugin's own tests"
"$ctest_command" --test-dir "$plugin_build" --output-on-failure

ae=$prefix/bin/plexus-ae
if [[ ! -x $ae ]]; then
  echo; echo "plexus-ae is not part of this build: training with the plugin skipped"
  exit 0
fi

data=$source_dir/data/train-sample
spec=$source_dir/examples/plugins/simplified_gdn/bls2017-sgdn.json
run=$work/run
step "plexus-ae train with --plugin (CPU, a few steps)"
"$ae" train --plugin "$plugin" --model "$spec" --data "$data" --device cpu \
  --steps 3 --batch 2 --patch 64 --log-every 1 --out "$run" 2>&1 | tee "$work/train.log"

step "plexus-ae eval with --plugin (one image at full size)"
[[ -f $run/model.safetensors ]] || { echo "FAIL: training wrote no $run/model.safetensors"; exit 1; }
mkdir -p "$work/eval-data"
first_image=$(find "$data" -type f \( -iname '*.png' -o -iname '*.jpg' -o -iname '*.jpeg' \) | sort | head -n 1)
cp "$first_image" "$work/eval-data/"
"$ae" eval --plugin "$plugin" --model "$run/model.safetensors" --data "$work/eval-data" --device cpu \
  --out "$work/eval" 2>&1 | tee "$work/eval.log"

step "plexus-ae train with PLEXUS_PLUGIN_PATH (the folder holding the plugin)"
PLEXUS_PLUGIN_PATH=$plugin_build "$ae" train --model "$spec" --data "$data" --device cpu \
  --steps 1 --batch 1 --patch 64 --log-every 1 --out "$work/run-from-path" > "$work/train-path.log" 2>&1 || { cat "$work/train-path.log"; exit 1; }

echo; echo "PASS: installed, built the example plugin out of tree, ran its tests, trained and evaluated with it"
