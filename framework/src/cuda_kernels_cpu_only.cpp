// The entry points of the framework's CUDA kernels (tensor operations, the
// optimisers, gradient clipping) in a build without CUDA. No tensor,
// parameter or gradient can live on a GPU there, so they are unreachable;
// they exist so that a CPU-only build links, and throw if reached.
#include "grad_clip_kernels.h"
#include "optimizer_kernels.h"
#include "plexus/error.h"
#include "plexus/tensor_ops.h"

namespace plexus::cuda {

void fill(Context&, Tensor& tensor, double) { throw DeviceError("no CUDA in this build for " + tensor.describe()); }
void set_values(Context&, Tensor& tensor, const std::vector<double>&) {
  throw DeviceError("no CUDA in this build for " + tensor.describe());
}
void add_into(Context&, Tensor& destination, const Tensor&) {
  throw DeviceError("no CUDA in this build for " + destination.describe());
}
bool all_finite(Context&, const Tensor& tensor) { throw DeviceError("no CUDA in this build for " + tensor.describe()); }
void copy_bytes(Context&, void*, const void*, std::size_t) { throw DeviceError("no CUDA in this build"); }
void convert(Context&, Tensor&, const Tensor&) { throw DeviceError("no CUDA in this build"); }

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

void clip_gradients(Context&, const std::vector<Tensor*>&, double, Tensor&, Tensor&) {
  throw DeviceError("no CUDA in this build: cannot clip gradients on a GPU");
}

}  // namespace plexus::cuda
