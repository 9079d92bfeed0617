#include "plexus/tensor_ops.h"

#include <cmath>

namespace plexus {

namespace {
void check_same(const Tensor& a, const Tensor& b, const char* op) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype() || a.device() != b.device())
    throw ShapeError(std::string(op) + ": " + a.describe() + " and " + b.describe() + " differ");
}
}  // namespace

void fill(Context& ctx, Tensor& tensor, double value) {
  if (tensor.device().is_cuda()) return cuda::fill(ctx, tensor, value);
  dispatch_float(tensor.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* data = tensor.data<T>();
    for (std::int64_t i = 0; i < tensor.numel(); ++i) data[i] = static_cast<T>(value);
  });
}

void add_into(Context& ctx, Tensor& destination, const Tensor& source) {
  check_same(destination, source, "add_into");
  if (destination.device().is_cuda()) return cuda::add_into(ctx, destination, source);
  dispatch_float(destination.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* out = destination.data<T>();
    const T* in = source.data<T>();
    for (std::int64_t i = 0; i < destination.numel(); ++i) out[i] += in[i];
  });
}

bool all_finite(Context& ctx, const Tensor& tensor) {
  if (tensor.device().is_cuda()) return cuda::all_finite(ctx, tensor);
  return dispatch_float(tensor.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* data = tensor.data<T>();
    for (std::int64_t i = 0; i < tensor.numel(); ++i)
      if (!std::isfinite(data[i])) return false;
    return true;
  });
}

}  // namespace plexus
