#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, from the repository root: builds this
# tree and the same tree without change.patch, runs the tests the change
# touches (and memcheck on its CUDA tests), then the step A/B.
set -u
d=$(dirname "$0")
source lab/checks/build-targets.sh
mkdir -p $OUT/this $OUT/base
SECONDS=0
rm -rf /tmp/base && mkdir /tmp/base && tar cf - --exclude=./.device --exclude=./build --exclude=./build-gpu . | tar xf - -C /tmp/base
patch -s -d /tmp/base -R -p1 < $d/change.patch || { echo "patch -R failed"; exit 1; }
tests="net_gradient_sharing_test graph_layers_spec_test add_test net_test net_bf16_storage_test net_branch_test step_graph_test training_test elementwise_bf16_storage_test concat_test split_test plexus_ae_cuda_graph_test"
build_targets $OUT/this /tmp/b plexus-bench plexus-ae $tests
echo "this built ${SECONDS}s"
(cd /tmp/base && build_targets $OUT/base /tmp/base-build plexus-bench)
echo "base built ${SECONDS}s"
for t in $tests; do run_gtest $OUT /tmp/b $t; done
for t in net_gradient_sharing_test add_test; do
  compute-sanitizer --tool memcheck --error-exitcode 1 /tmp/b/tests/$t --gtest_filter='*Cuda*' --gtest_brief=1 > $OUT/memcheck-$t.log 2>&1; echo "memcheck $t rc=$? $(grep -E 'ERROR SUMMARY' $OUT/memcheck-$t.log)"
done
echo "t=${SECONDS}s"
