// Without CUDA no parameter can live on a GPU, so these are unreachable; they
// exist so a CPU-only build links.
#include "optimizer_kernels.h"

namespace plexus::cuda {
void sgd_update(Context&, Tensor& weight, const Tensor&, Tensor&, double, double) {
  throw DeviceError("no CUDA in this build for " + weight.describe());
}
struct AdamDevice {};
AdamDevice* create_adam_device() { return new AdamDevice; }
void destroy_adam_device(AdamDevice* device) noexcept { delete device; }
void adam_prepare(Context&, AdamDevice&, const std::vector<AdamTensors>& tensors, double, double, double) {
  throw DeviceError("no CUDA in this build for " + tensors.at(0).weight->describe());
}
void adam_apply(Context&, AdamDevice&, double, double, double) { throw DeviceError("no CUDA in this build"); }
}  // namespace plexus::cuda
