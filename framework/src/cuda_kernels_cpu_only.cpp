// The entry points of libplexus's CUDA kernels (tensor operations) in a
// build without CUDA (libplexus_train's, the optimisers' and gradient
// clipping's, are at the end of optimizer.cpp and grad_clip.cpp). No tensor,
// parameter or gradient can live on a GPU there, so they are unreachable;
// they exist so that a CPU-only build links, and throw if reached.
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

}  // namespace plexus::cuda
