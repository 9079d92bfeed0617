// Without CUDA no parameter can live on a GPU, so these are unreachable; they
// exist so a CPU-only build links.
#include "optimizer_kernels.h"

namespace plexus::cuda {
void sgd_update(Context&, Tensor& weight, const Tensor&, Tensor&, double, double) {
  throw DeviceError("no CUDA in this build for " + weight.describe());
}
void adam_update(Context&, Tensor& weight, const Tensor&, Tensor&, Tensor&, double, double, double, double, double,
                 double) {
  throw DeviceError("no CUDA in this build for " + weight.describe());
}
}  // namespace plexus::cuda
