#!/usr/bin/env bash
# The codec on a machine with an NVIDIA GPU, from the repository root:
#   bash lab/checks/codec-gpu-check.sh [IMAGE_FOLDER]
# 1. builds for sm_90 (-j16) only what it needs: plexus-ae, plexus-codec-bench, codec_test;
# 2. runs codec_test with nothing skipped, the CUDA cross-device test included
#    (compress on CUDA, decode on the CPU and CUDA: the same latent exactly,
#    reconstructions within one 8-bit level);
# 3. times compress and decompress per image on the GPU (20 runs after 3
#    warm-up runs) and on the CPU (3 runs), with plexus-codec-bench, on the
#    PNGs of IMAGE_FOLDER (default data/eval-sample: three Kodak images, 500x500);
# 4. times PyTorch's bls2017 transforms (eager and torch.compile, same
#    precision) on one 512x512 input (lab/bench/torch_codec_bench.py);
# 5. runs plexus-ae eval on the GPU over the same folder (real file bpp next
#    to the estimate, decoded PSNR).
# Logs go to $OUT (or codec-gpu-logs/). STB_INCLUDE_DIR names stb's folder
# when it is not installed.
set -uo pipefail
cd "$(dirname "$0")/../.."
logs=${OUT:-codec-gpu-logs}
mkdir -p "$logs"
build=${BUILD:-build-gpu}
images=${1:-data/eval-sample}
model=models/trained/bls2017/model.safetensors
stb_option=()
[ -n "${STB_INCLUDE_DIR:-}" ] && stb_option=(-DSTB_INCLUDE_DIR="$STB_INCLUDE_DIR")
started=$(date +%s)

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
echo "== configure + build"
if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "${stb_option[@]}" &&
       cmake --build "$build" -j 16 --target plexus-ae plexus-codec-bench codec_test; } > "$logs/build.log" 2>&1; then
  tail -40 "$logs/build.log"
  echo "SUMMARY: build FAILED"
  exit 1
fi
echo "built in $(( $(date +%s) - started )) s"

echo "== codec_test (CUDA cross-device test included; nothing may skip)"
"$build/tests/codec_test" > "$logs/codec_test.log" 2>&1
test_rc=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$logs/codec_test.log"
skipped=$(grep -c "^\[  SKIPPED \] .*\." "$logs/codec_test.log")
grep -q "OK \] CodecCrossDevice" "$logs/codec_test.log" && cross="passed" || cross="NOT passed"

images_list=("$images"/*.png)
echo "== plexus-codec-bench on cuda (${#images_list[@]} images)"
"$build/bin/plexus-codec-bench" --model "$model" --device cuda --repeats 20 --warmup 3 "${images_list[@]}" \
  | tee "$logs/bench-cuda.jsonl"
echo "== plexus-codec-bench on cpu (first image)"
"$build/bin/plexus-codec-bench" --model "$model" --device cpu --repeats 3 --warmup 1 "${images_list[0]}" \
  | tee "$logs/bench-cpu.jsonl"
echo "== PyTorch transforms (eager, torch.compile) for comparison"
timeout 240 "${PYTHON:-python3}" lab/bench/torch_codec_bench.py 2>"$logs/torch.err" | tee "$logs/torch-codec.jsonl" ||
  { echo "PyTorch reference failed:"; tail -5 "$logs/torch.err"; }
echo "== plexus-ae eval on cuda"
"$build/bin/plexus-ae" eval --model "$model" --data "$images" --device cuda 2>&1 | tee "$logs/eval-cuda.txt"

slowest() {  # the largest median of a phase over the images of a log
  python3 -c "import json,sys; print(max(json.loads(l)['$2']['median'] for l in open('$1') if l.strip()))"
}
enc=$(slowest "$logs/bench-cuda.jsonl" encode_ms)
dec=$(slowest "$logs/bench-cuda.jsonl" decode_ms)
echo "SUMMARY: codec_test rc=$test_rc, skipped=$skipped, cross-device test $cross;" \
     "GPU median encode <= $enc ms, decode <= $dec ms per 500x500 image (goal < 30);" \
     "total $(( $(date +%s) - started )) s" | tee "$logs/summary.txt"
[ "$test_rc" = 0 ] && [ "$skipped" = 0 ]
