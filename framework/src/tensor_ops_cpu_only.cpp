// Without CUDA no tensor can live on a GPU, so these are unreachable; they
// exist so a CPU-only build links.
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
}  // namespace plexus::cuda
