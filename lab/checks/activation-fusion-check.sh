#!/usr/bin/env bash
# Activations fused into the convolution or Add before them (Net::set_activation_fusion),
# on a machine with an NVIDIA GPU, from the repository root:
#   PHASES="tests steps profile" bash lab/checks/activation-fusion-check.sh [ROUNDS]   # default 3 rounds
# tests: builds the tests of the fusion, the convolutions, the activations
# and the training paths through them, runs them, and memcheck over the
# fusion's and the convolutions' CUDA tests (TESTS narrows both). steps: the bf16 steps of the
# models with fusable activations (MODELS, default the hyperprior,
# mbt2018-mean, minnen2020-channel and cheng2020-attn-mean), fused
# (PLEXUS_FUSE_ACTIVATIONS=1, the default) and not, ROUNDS times alternating
# (lab/checks/step-ab.sh), with peak memory. profile: cheng2020-attn-mean's
# per-node times, eager, both ways (lab/bench/profile_table.py).
# Each phase fits one 10-minute call on an H100/H200 once BUILD (default
# /tmp/b) holds a build. Logs go to $OUT (default activation-fusion-logs/).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source lab/checks/build-targets.sh
source lab/checks/step-ab.sh
rounds=${1:-3}
logs=${OUT:-activation-fusion-logs}
build=${BUILD:-/tmp/b}
phases=${PHASES:-tests steps profile}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
tests=(net_activation_fusion_test conv2d_test conv_transpose2d_test conv_bf16_storage_test
       convolution_kept_source_test relu_test leaky_relu_test add_test elementwise_bf16_storage_test net_test
       net_bf16_storage_test net_gradient_sharing_test net_inference_only_test step_graph_test
       plexus_ae_cuda_graph_test plexus_ae_bf16_train_test plexus_ae_train_test mbt2018_mean_model_test)
memcheck_tests=(net_activation_fusion_test conv2d_test conv_transpose2d_test)
[ -n "${TESTS:-}" ] && read -r -a tests <<< "$TESTS" && memcheck_tests=("${tests[@]}")  # e.g. TESTS=net_activation_fusion_test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
SECONDS=0
build_targets "$logs" "$build" plexus-bench plexus-ae "${tests[@]}"
echo "built (${SECONDS}s)"
status=0
if [[ " $phases " == *" tests "* ]]; then
  for test in "${tests[@]}"; do run_gtest "$logs" "$build" "$test" || status=1; done
  for test in "${memcheck_tests[@]}"; do
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 "$build/tests/$test" --gtest_filter='*Cuda*' \
      --gtest_brief=1 > "$logs/memcheck-$test.log" 2>&1 || status=1
    echo "memcheck $test: $(grep -E 'ERROR SUMMARY' "$logs/memcheck-$test.log" | tail -1)"
  done
  echo "tests done (${SECONDS}s)"
fi
if [[ " $phases " == *" steps "* ]]; then
  MODELS=${MODELS:-"bmshj2018-hyperprior mbt2018-mean minnen2020-channel cheng2020-attn-mean"} \
    step_ab "$logs" "$build" "$rounds" PLEXUS_FUSE_ACTIVATIONS unfused fused || status=1
  echo "steps done (${SECONDS}s)"
fi
if [[ " $phases " == *" profile "* ]]; then
  for setting in 0 1; do
    PLEXUS_FUSE_ACTIVATIONS=$setting "$build/bin/plexus-bench" --precision bf16 --models --only cheng2020-attn-mean \
      --profile > "$logs/profile-fuse$setting-cheng2020-attn-mean.jsonl" 2>> "$logs/steps.err" || status=1
  done
  python3 lab/bench/profile_table.py "$logs/profile-fuse0-cheng2020-attn-mean.jsonl" \
    "$logs/profile-fuse1-cheng2020-attn-mean.jsonl" || status=1
fi
[ $status -eq 0 ] && echo "SUMMARY: activation-fusion-check passed" || echo "SUMMARY: activation-fusion-check FAILED"
exit $status
