// Without CUDA no gradient can live on a GPU, so this is unreachable; it
// exists so a CPU-only build links.
#include "grad_clip_kernels.h"

#include "plexus/error.h"

namespace plexus::cuda {
void clip_gradients(Context&, const std::vector<Tensor*>&, double, Tensor&, Tensor&) {
  throw DeviceError("no CUDA in this build: cannot clip gradients on a GPU");
}
}  // namespace plexus::cuda
