#include "plexus/grad_clip.h"

#include <cmath>
#include <string>

#include "grad_clip_kernels.h"
#include "plexus/error.h"

namespace plexus {

GradientClipper::GradientClipper(double max_norm) : max_norm_(max_norm) {
  if (!(max_norm > 0) || !std::isfinite(max_norm))
    throw ConfigError("gradient clipping: the maximum norm must be > 0 and finite, got " + std::to_string(max_norm));
}

void GradientClipper::clip(Context& ctx, const std::vector<NamedParameter>& all_parameters) {
  std::vector<NamedParameter> parameters;  // buffers carry no gradient
  for (const NamedParameter& named : all_parameters)
    if (named.parameter->trainable) parameters.push_back(named);
  if (parameters.empty()) return;
  const Device device = parameters.front().parameter->grad.device();
  for (const NamedParameter& named : parameters)
    if (named.parameter->grad.device() != device)
      throw DeviceError("gradient clipping: parameter '" + named.name + "' is on " +
                        named.parameter->grad.device().str() + ", the others on " + device.str());
  if (device.is_cuda()) {
    const Shape partial_shape{static_cast<std::int64_t>(parameters.size()) * cuda::kClipPartialBlocks};
    if (!partials_.defined() || partials_.shape() != partial_shape || partials_.device() != device)
      partials_ = Tensor(partial_shape, DType::f64, device);
    if (!result_.defined() || result_.device() != device) result_ = Tensor({2}, DType::f64, device);
    std::vector<Tensor*> grads;
    for (const NamedParameter& named : parameters) grads.push_back(&named.parameter->grad);
    cuda::clip_gradients(ctx, grads, max_norm_, partials_, result_);
    return;
  }
  double sum = 0;  // f64 whatever the gradients' dtype
  for (const NamedParameter& named : parameters) {
    dispatch_float(named.parameter->grad.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* g = named.parameter->grad.data<T>();
      for (std::int64_t i = 0; i < named.parameter->grad.numel(); ++i) sum += static_cast<double>(g[i]) * g[i];
    });
  }
  cpu_norm_ = std::sqrt(sum);
  const double factor = std::min(1.0, max_norm_ / (cpu_norm_ + 1e-6));
  if (factor >= 1.0) return;
  for (const NamedParameter& named : parameters) {
    dispatch_float(named.parameter->grad.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* g = named.parameter->grad.data<T>();
      for (std::int64_t i = 0; i < named.parameter->grad.numel(); ++i) g[i] = static_cast<T>(g[i] * factor);
    });
  }
}

double GradientClipper::last_norm() const {
  if (result_.defined() && result_.device().is_cuda()) return result_.to_values()[0];
  return cpu_norm_;
}

}  // namespace plexus

#if !PLEXUS_WITH_CUDA
// Gradient clipping's CUDA entry point in a build without CUDA: unreachable
// (no gradient can live on a GPU there); it throws if reached.
namespace plexus::cuda {

void clip_gradients(Context&, const std::vector<Tensor*>&, double, Tensor&, Tensor&) {
  throw DeviceError("no CUDA in this build: cannot clip gradients on a GPU");
}

}  // namespace plexus::cuda
#endif
