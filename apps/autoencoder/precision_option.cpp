#include "precision_option.h"

#include "plexus/error.h"

namespace plexus::ae {

const char* const kPrecisionHelp =
    "f32 (strict f32 products), tf32 (f32 storage, matrix products and convolutions on TF32 tensor cores, "
    "~1e-3 relative per product; the default, as PyTorch's own default allows TF32 in cuDNN convolutions) or "
    "bf16 (not implemented yet). Applies on CUDA; the CPU always computes in f32";

Precision choose_precision(const std::string& option, Device device) {
  const Precision precision = parse_precision(option);
  if (precision == Precision::bf16)
    throw ConfigError(
        "--precision bf16: bf16 activations with f32 master weights are not implemented yet; use "
        "--precision tf32 (the default: f32 storage, TF32 tensor-core products) or --precision f32");
  return device.is_cuda() ? precision : Precision::f32;
}

}  // namespace plexus::ae
