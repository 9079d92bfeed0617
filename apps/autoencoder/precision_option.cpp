#include "precision_option.h"

namespace plexus::ae {

namespace {

const std::string kPrecisionChoices =
    "f32 (strict f32 products), tf32 (f32 storage, matrix products and convolutions on TF32 tensor cores, ~1e-3 "
    "relative per product, as PyTorch's default allows in cuDNN convolutions) or bf16 (f32 storage; the "
    "convolutions and cuBLAS matrix products on BF16 tensor cores, operands rounded to bf16, each within 4e-3 "
    "relative, f32 accumulation; GDN's tensor-core kernels as under tf32; weights, optimiser, entropy model and "
    "losses in f32). Applies on CUDA; the CPU always computes in f32. ";

}  // namespace

const std::string kTrainPrecisionHelp =
    kPrecisionChoices + "Default bf16: the fastest, and training in bf16 showed no rate-distortion cost against tf32 "
                        "(docs/performance.md, \"BF16 training quality against TF32\")";

const std::string kEvalPrecisionHelp =
    kPrecisionChoices + "Default tf32: reported rates and distortions favour accuracy over speed";

Precision choose_precision(const std::string& option, Device device) {
  const Precision precision = parse_precision(option);
  return device.is_cuda() ? precision : Precision::f32;
}

}  // namespace plexus::ae
