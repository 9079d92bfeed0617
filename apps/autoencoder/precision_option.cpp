#include "precision_option.h"

namespace plexus::ae {

const char* const kPrecisionHelp =
    "f32 (strict f32 products), tf32 (f32 storage, matrix products and convolutions on TF32 tensor cores, "
    "~1e-3 relative per product; the default, as PyTorch's own default allows TF32 in cuDNN convolutions) or "
    "bf16 (f32 storage; the convolutions and cuBLAS matrix products on BF16 tensor cores, operands rounded to "
    "bf16, each within 4e-3 relative, f32 accumulation; GDN's tensor-core kernels as under tf32; weights, "
    "optimiser, entropy model and losses in f32). Applies on CUDA; the CPU always computes in f32";

Precision choose_precision(const std::string& option, Device device) {
  const Precision precision = parse_precision(option);
  return device.is_cuda() ? precision : Precision::f32;
}

}  // namespace plexus::ae
