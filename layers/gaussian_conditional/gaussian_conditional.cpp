#include "gaussian_conditional/gaussian_conditional.h"

#include <cmath>
#include <sstream>

namespace plexus::layers {

namespace {

// Phi(x) = erfc(-x / sqrt 2) / 2: accurate on the lower tail, where p is computed.
template <typename T>
T standard_normal_cdf(T x) {
  return T(0.5) * std::erfc(-x * T(M_SQRT1_2));
}

// phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
template <typename T>
T standard_normal_density(T x) {
  return std::exp(T(-0.5) * x * x) * T(0.5 * M_2_SQRTPI * M_SQRT1_2);
}

}  // namespace

GaussianConditional::GaussianConditional(LayerConfig& config) {
  scale_bound_ = config.number("scale_bound", 0.11);
  if (!(scale_bound_ > 0.0) || !std::isfinite(scale_bound_))
    config.fail("scale_bound", "must be a finite number > 0, got " + number_text(scale_bound_));
  likelihood_bound_ = config.number("likelihood_bound", 1e-9);
  if (!(likelihood_bound_ >= 0.0 && likelihood_bound_ < 1.0))
    config.fail("likelihood_bound", "must be in [0, 1), got " + number_text(likelihood_bound_));
}

std::vector<Shape> GaussianConditional::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 2 && inputs.size() != 3)
    fail_shape("takes 2 or 3 inputs (y_hat, scales[, means]), got " + std::to_string(inputs.size()));
  const Shape& values = inputs[0];
  if (values.size() != 4) fail_shape("input 0 (y_hat) must be [N, C, H, W], got " + shape_str(values));
  const char* names[] = {"y_hat", "scales", "means"};
  for (std::size_t i = 1; i < inputs.size(); ++i)
    if (inputs[i] != values)
      fail_shape("input " + std::to_string(i) + " (" + names[i] + ") " + shape_str(inputs[i]) +
                 " must have the shape of y_hat " + shape_str(values));
  return {values};
}

void GaussianConditional::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* y = inputs[0]->data<T>();
    const T* scale = inputs[1]->data<T>();
    const T* mean = inputs.size() > 2 ? inputs[2]->data<T>() : nullptr;
    T* p = outputs[0]->data<T>();
    const T scale_bound = static_cast<T>(scale_bound_), likelihood_bound = static_cast<T>(likelihood_bound_);
    const std::int64_t n = inputs[0]->numel();
    for (std::int64_t i = 0; i < n; ++i) {
      const T a = std::abs(mean ? y[i] - mean[i] : y[i]);
      const T s = std::max(scale[i], scale_bound);
      const T likelihood = standard_normal_cdf((T(0.5) - a) / s) - standard_normal_cdf((T(-0.5) - a) / s);
      p[i] = std::max(likelihood, likelihood_bound);
    }
  });
}

void GaussianConditional::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                       const ConstTensors& output_grads, const MutableTensors& input_grads) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* y = inputs[0]->data<T>();
    const T* scale = inputs[1]->data<T>();
    const T* mean = inputs.size() > 2 ? inputs[2]->data<T>() : nullptr;
    const T* output_grad = output_grads[0]->data<T>();
    T* y_grad = input_grads[0] ? input_grads[0]->data<T>() : nullptr;
    T* scale_grad = input_grads[1] ? input_grads[1]->data<T>() : nullptr;
    T* mean_grad = input_grads.size() > 2 && input_grads[2] ? input_grads[2]->data<T>() : nullptr;
    const T scale_bound = static_cast<T>(scale_bound_), likelihood_bound = static_cast<T>(likelihood_bound_);
    const std::int64_t n = inputs[0]->numel();
    for (std::int64_t i = 0; i < n; ++i) {
      const T v = mean ? y[i] - mean[i] : y[i];
      const T a = std::abs(v);
      const T s = std::max(scale[i], scale_bound);
      const T u = (T(0.5) - a) / s, l = (T(-0.5) - a) / s;
      const T likelihood = standard_normal_cdf(u) - standard_normal_cdf(l);
      // LowerBound, identity if towards: pass where p >= bound or where descent raises p.
      const T p_grad = likelihood >= likelihood_bound || output_grad[i] < T(0) ? output_grad[i] : T(0);
      const T phi_u = standard_normal_density(u), phi_l = standard_normal_density(l);
      const T sign = v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0));
      const T v_grad = p_grad * sign * (phi_l - phi_u) / s;
      const T s_grad = p_grad * (l * phi_l - u * phi_u) / s;
      if (y_grad) y_grad[i] = v_grad;
      if (mean_grad) mean_grad[i] = -v_grad;
      if (scale_grad) scale_grad[i] = scale[i] >= scale_bound || s_grad < T(0) ? s_grad : T(0);
    }
  });
}

void register_gaussian_conditional(Registry& registry) {
  registry.add(
      "GaussianConditional", [](LayerConfig& config) { return std::make_unique<GaussianConditional>(config); },
      "likelihood of y_hat under N(mean, max(scale, scale_bound)^2) convolved with U(-1/2, 1/2), "
      "lower-bounded; inputs (y_hat, scales[, means])");
}

}  // namespace plexus::layers
