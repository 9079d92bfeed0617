// The CPU halves of masked_ops.h; CUDA tensors go to masked_ops.cu.
#include "masked_ops.h"

#include <string>

#include "plexus/error.h"
#include "plexus/layer.h"

namespace sparse_conv {

namespace {

void check_alike(const plexus::Tensor& a, const plexus::Tensor& mask, const plexus::Tensor& out) {
  if (a.shape() != mask.shape() || a.shape() != out.shape() || a.dtype() != mask.dtype() || a.dtype() != out.dtype() ||
      a.device() != mask.device() || a.device() != out.device())
    throw plexus::Error("sparse_conv masked product: tensors differ: " + a.describe() + ", " + mask.describe() + ", " +
                        out.describe());
}

bool on_cuda(const plexus::Tensor& a) {
  if (!a.device().is_cuda()) return false;
  if (!PLEXUS_PLUGIN_WITH_CUDA) throw plexus::DeviceError("sparse_conv was built without its CUDA kernels");
  return true;
}

}  // namespace

void masked_product([[maybe_unused]] plexus::Context& ctx, const plexus::Tensor& a, const plexus::Tensor& mask,
                    plexus::Tensor& out, MaskedWrite write) {
  check_alike(a, mask, out);
  if (on_cuda(a)) {
#if PLEXUS_PLUGIN_WITH_CUDA
    cuda::masked_product(ctx, a, mask, out, write);
#endif
    return;
  }
  const bool accumulate = write == MaskedWrite::accumulate;
  plexus::dispatch_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* x = a.data<T>();
    const T* m = mask.data<T>();
    T* y = out.data<T>();
    for (std::int64_t i = 0; i < a.numel(); ++i) y[i] = accumulate ? y[i] + x[i] * m[i] : x[i] * m[i];
  });
}

}  // namespace sparse_conv
