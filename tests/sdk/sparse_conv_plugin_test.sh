#!/usr/bin/env bash
# The sparse_conv example plugin end to end, as a user meets it:
#   1. install the already-built Plexus to a temporary prefix;
#   2. build examples/plugins/sparse_conv out of tree against it and run its
#      own tests (gradient checks; CUDA ones skip without a GPU);
#   3. when plexus-ae is installed: its training script for a few CPU steps
#      (a dense control and a 90% pruned decoder fine-tuned from the shipped
#      bls2017 model, pruning within those steps), then its Kodak evaluation
#      script on one bundled image, with the pruned decoder also run by the
#      sparse layers: the same PSNR either way.
# Nothing of Plexus is rebuilt.
#
# usage: sparse_conv_plugin_test.sh <plexus build dir> <plexus source dir> [cmake] [ctest]
set -euo pipefail

build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
cmake_command=${3:-cmake}
ctest_command=${4:-ctest}

work=$(mktemp -d "${TMPDIR:-/tmp}/plexus-sparse-conv-XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
step() { echo; echo "== $*"; }

step "install Plexus to $prefix"
"$cmake_command" --install "$build_dir" --prefix "$prefix" > "$work/install.log" 2>&1 ||
  { cat "$work/install.log"; echo "FAIL: cmake --install failed; build every target first"; exit 1; }

generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
step "configure and build the sparse_conv plugin against the installed package"
plugin_build=$work/sparse_conv
"$cmake_command" -S "$source_dir/examples/plugins/sparse_conv" -B "$plugin_build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
"$cmake_command" --build "$plugin_build" -j 2
plugin=$plugin_build/libsparse_conv.so
[[ -f $plugin ]] || { echo "FAIL: $plugin was not built"; exit 1; }

step "the plugin's own tests"
"$ctest_command" --test-dir "$plugin_build" --output-on-failure

ae=$prefix/bin/plexus-ae
if [[ ! -x $ae ]]; then
  echo; echo "plexus-ae is not part of this build: the training and evaluation scripts are skipped"
  exit 0
fi
tools=$source_dir/examples/plugins/sparse_conv/tools
export PLEXUS_AE=$ae SPARSE_CONV_PLUGIN=$plugin

step "train-pruned.sh: 2 runs of 3 CPU steps, pruned at steps 1-3"
SPARSITIES=0.9 STEPS=3 BATCH=1 PATCH=64 PRUNE_START=1 PRUNE_END=3 PRUNE_EVERY=1 DEVICE=cpu THREADS=0 CPU_THREADS=1 \
  bash "$tools/train-pruned.sh" "$source_dir/data/train-sample" 600 "$work/runs" | tee "$work/train.out"
for run in dense sparsity-90; do
  [[ -f $work/runs/$run/model.safetensors ]] || { echo "FAIL: no model for $run"; exit 1; }
done
grep -Eq "^sparsity-90 +3 +90\.00%" "$work/train.out" || { echo "FAIL: sparsity-90 is not at 90% after step 3"; exit 1; }
grep -Eq "^dense +3 +0\.00%" "$work/train.out" || { echo "FAIL: the dense control is not dense"; exit 1; }

step "eval-kodak.sh on one image, the pruned decoder also run by SparseConvTranspose2d"
mkdir -p "$work/kodak"
cp "$source_dir/data/eval-sample/kodim23.png" "$work/kodak/"
SPARSE_DECODER=1 bash "$tools/eval-kodak.sh" "$work/kodak" "$work/runs" | tee "$work/eval.out"
python3 - "$work/eval.out" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 6 and cells[0] not in ("run", "---"):
        rows[cells[0]] = float(cells[3])
for name in ("sparsity-90",):
    if name not in rows or name + "-sparse" not in rows:
        sys.exit(f"FAIL: no rows for {name}: {sorted(rows)}")
    if abs(rows[name] - rows[name + "-sparse"]) > 0.002:
        sys.exit(f"FAIL: {name}: PSNR {rows[name]} with PrunedConvTranspose2d, {rows[name + '-sparse']} with SparseConvTranspose2d")
print("pruned and sparse decoders agree:", {k: v for k, v in rows.items()})
PY

echo; echo "PASS: built the sparse_conv plugin out of tree, ran its tests, its training and evaluation scripts"
