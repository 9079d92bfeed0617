// SimplifiedGDN / SimplifiedIGDN: params, shapes, parameters and the CPU
// kernels (math in simplified_gdn.h). Plain loops: the inner loops run over
// the contiguous pixels of one channel, which the compiler vectorises.
#include "simplified_gdn.h"

#include "plexus/plugin.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>

namespace simplified_gdn {

namespace {

std::string number_text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// Pixels per image: the product of the dimensions after the channel axis.
std::int64_t pixels_per_image(const Shape& shape) {
  std::int64_t count = 1;
  for (std::size_t axis = 2; axis < shape.size(); ++axis) count *= shape[axis];
  return count;
}

// v = max(s, bound)^2 - pedestal, element-wise.
template <typename T>
std::vector<T> effective_values(const plexus::Tensor& stored, double bound, double pedestal) {
  const T* s = stored.data<T>();
  std::vector<T> values(static_cast<std::size_t>(stored.numel()));
  for (std::size_t e = 0; e < values.size(); ++e) {
    T bounded = std::max(s[e], T(bound));
    values[e] = bounded * bounded - T(pedestal);
  }
  return values;
}

// ds += 2 max(s, bound) dv, where s >= bound or dv < 0 (see simplified_gdn.h).
template <typename T>
void accumulate_stored_gradient(const plexus::Tensor& stored, const std::vector<double>& value_grad, double bound,
                                plexus::Tensor& stored_grad) {
  const T* s = stored.data<T>();
  T* ds = stored_grad.data<T>();
  for (std::size_t e = 0; e < value_grad.size(); ++e) {
    bool passes = s[e] >= T(bound) || value_grad[e] < 0.0;
    if (passes) ds[e] += T(2.0 * std::max(double(s[e]), bound) * value_grad[e]);
  }
}

template <typename T>
T sign(T value) {
  return T((value > T(0)) - (value < T(0)));
}

// n[i, p] = beta_i + sum_j gamma_ij |x[j, p]| for one image; x, n are [C, S].
template <typename T>
void compute_norm(const std::vector<T>& magnitude, const std::vector<T>& beta, const std::vector<T>& gamma,
                  std::int64_t channels, std::int64_t pixels, std::vector<T>& norm) {
  for (std::int64_t i = 0; i < channels; ++i) {
    T* norm_row = norm.data() + i * pixels;
    std::fill(norm_row, norm_row + pixels, beta[i]);
    for (std::int64_t j = 0; j < channels; ++j) {
      const T weight = gamma[i * channels + j];
      const T* magnitude_row = magnitude.data() + j * pixels;
      for (std::int64_t p = 0; p < pixels; ++p) norm_row[p] += weight * magnitude_row[p];
    }
  }
}

}  // namespace

SimplifiedGDN::SimplifiedGDN(plexus::LayerConfig& config, bool inverse)
    : inverse_(inverse), beta_min_(config.number("beta_min", 1e-6)), gamma_init_(config.number("gamma_init", 0.1)) {
  const double reparam_offset = config.number("reparam_offset", std::ldexp(1.0, -18));
  if (!(beta_min_ > 0.0) || !std::isfinite(beta_min_))
    config.fail("beta_min", "must be a finite number > 0 (it keeps n_i away from 0), got " + number_text(beta_min_));
  if (!(gamma_init_ >= 0.0) || !std::isfinite(gamma_init_))
    config.fail("gamma_init", "must be a finite number >= 0, got " + number_text(gamma_init_));
  if (!(reparam_offset > 0.0) || !std::isfinite(reparam_offset))
    config.fail("reparam_offset", "must be a finite number > 0, got " + number_text(reparam_offset));
  reparam_.pedestal = reparam_offset * reparam_offset;
  reparam_.beta_bound = std::sqrt(beta_min_ + reparam_.pedestal);
  reparam_.gamma_bound = reparam_offset;
}

std::vector<Shape> SimplifiedGDN::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  const Shape& x = inputs[0];
  if (x.size() < 2)
    fail_shape("expects an input [N, C, ...] of rank >= 2 (channel axis 1), got " + plexus::shape_str(x));
  if (x[1] < 1) fail_shape("needs at least 1 channel, got input " + plexus::shape_str(x));
  if (channels_ != 0 && x[1] != channels_)
    fail_shape("has parameters for " + std::to_string(channels_) + " channels, got input " + plexus::shape_str(x) +
               " with " + std::to_string(x[1]));
  return {x};
}

void SimplifiedGDN::create_parameters(const std::vector<Shape>& inputs) {
  channels_ = inputs[0][1];
  const double pedestal = reparam_.pedestal;
  declare_parameter("beta", {channels_}, plexus::init::constant(std::sqrt(1.0 + pedestal)));
  const double gamma_init = gamma_init_;
  declare_parameter(
      "gamma", {channels_, channels_},
      plexus::init::custom("sqrt(" + number_text(gamma_init) + " * I + pedestal)",
                           [gamma_init, pedestal](std::vector<double>& values, const Shape& shape, std::mt19937_64&) {
                             const std::int64_t channels = shape[0];
                             for (std::int64_t i = 0; i < channels; ++i)
                               for (std::int64_t j = 0; j < channels; ++j)
                                 values[i * channels + j] = std::sqrt((i == j ? gamma_init : 0.0) + pedestal);
                           }));
}

void SimplifiedGDN::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  const plexus::Tensor& input = *inputs[0];
  const std::int64_t images = input.dim(0), channels = input.dim(1);
  const std::int64_t pixels = pixels_per_image(input.shape());
  plexus::dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> beta = effective_values<T>(parameter("beta").value, reparam_.beta_bound, reparam_.pedestal);
    const std::vector<T> gamma = effective_values<T>(parameter("gamma").value, reparam_.gamma_bound, reparam_.pedestal);
    std::vector<T> magnitude(static_cast<std::size_t>(channels * pixels));
    std::vector<T> norm(magnitude.size());
    for (std::int64_t n = 0; n < images; ++n) {
      const T* x = input.data<T>() + n * channels * pixels;
      T* y = outputs[0]->data<T>() + n * channels * pixels;
      for (std::size_t e = 0; e < magnitude.size(); ++e) magnitude[e] = std::abs(x[e]);
      compute_norm(magnitude, beta, gamma, channels, pixels, norm);
      for (std::size_t e = 0; e < norm.size(); ++e) y[e] = inverse_ ? x[e] * norm[e] : x[e] / norm[e];
    }
  });
}

void SimplifiedGDN::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                 const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const plexus::Tensor& input = *inputs[0];
  const std::int64_t images = input.dim(0), channels = input.dim(1);
  const std::int64_t pixels = pixels_per_image(input.shape());
  plexus::Parameter& beta_parameter = parameter("beta");
  plexus::Parameter& gamma_parameter = parameter("gamma");
  plexus::dispatch_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> beta = effective_values<T>(beta_parameter.value, reparam_.beta_bound, reparam_.pedestal);
    const std::vector<T> gamma = effective_values<T>(gamma_parameter.value, reparam_.gamma_bound, reparam_.pedestal);
    const std::size_t size = static_cast<std::size_t>(channels * pixels);
    std::vector<T> magnitude(size), norm(size), t(size), mixed(size);
    std::vector<double> beta_grad(beta.size(), 0.0), gamma_grad(gamma.size(), 0.0);
    for (std::int64_t n = 0; n < images; ++n) {
      const T* x = input.data<T>() + n * channels * pixels;
      const T* dy = output_grads[0]->data<T>() + n * channels * pixels;
      for (std::size_t e = 0; e < size; ++e) magnitude[e] = std::abs(x[e]);
      compute_norm(magnitude, beta, gamma, channels, pixels, norm);
      // t_i = dy_i x_i c_i
      for (std::size_t e = 0; e < size; ++e) t[e] = inverse_ ? dy[e] * x[e] : -dy[e] * x[e] / (norm[e] * norm[e]);

      if (input_grads[0]) {
        // dx_k = dy_k / n_k (or dy_k n_k) + sign(x_k) sum_i gamma_ik t_i
        T* dx = input_grads[0]->data<T>() + n * channels * pixels;
        std::fill(mixed.begin(), mixed.end(), T(0));
        for (std::int64_t i = 0; i < channels; ++i)
          for (std::int64_t k = 0; k < channels; ++k) {
            const T weight = gamma[i * channels + k];
            const T* t_row = t.data() + i * pixels;
            T* mixed_row = mixed.data() + k * pixels;
            for (std::int64_t p = 0; p < pixels; ++p) mixed_row[p] += weight * t_row[p];
          }
        for (std::size_t e = 0; e < size; ++e)
          dx[e] = (inverse_ ? dy[e] * norm[e] : dy[e] / norm[e]) + sign(x[e]) * mixed[e];
      }

      // dbeta_i = sum t_i,  dgamma_ik = sum t_i |x_k|
      for (std::int64_t i = 0; i < channels; ++i) {
        const T* t_row = t.data() + i * pixels;
        double row_sum = 0.0;
        for (std::int64_t p = 0; p < pixels; ++p) row_sum += t_row[p];
        beta_grad[i] += row_sum;
        for (std::int64_t k = 0; k < channels; ++k) {
          const T* magnitude_row = magnitude.data() + k * pixels;
          double product = 0.0;
          for (std::int64_t p = 0; p < pixels; ++p) product += double(t_row[p]) * magnitude_row[p];
          gamma_grad[i * channels + k] += product;
        }
      }
    }
    accumulate_stored_gradient<T>(beta_parameter.value, beta_grad, reparam_.beta_bound, beta_parameter.grad);
    accumulate_stored_gradient<T>(gamma_parameter.value, gamma_grad, reparam_.gamma_bound, gamma_parameter.grad);
  });
}

void register_layers(plexus::Registry& registry) {
  registry.add(
      "SimplifiedGDN", [](plexus::LayerConfig& config) { return std::make_unique<SimplifiedGDN>(config, false); },
      "y_i = x_i / (beta_i + sum_j gamma_ij |x_j|) (Johnston et al. 2019)");
  registry.add(
      "SimplifiedIGDN", [](plexus::LayerConfig& config) { return std::make_unique<SimplifiedGDN>(config, true); },
      "y_i = x_i * (beta_i + sum_j gamma_ij |x_j|), the inverse of SimplifiedGDN");
}

}  // namespace simplified_gdn

// The two entry points Plexus looks up in a plugin (plexus/plugin.h).
extern "C" int plexus_plugin_abi_version() { return plexus::kPluginAbiVersion; }

extern "C" void plexus_plugin_register(plexus::Registry* registry) { simplified_gdn::register_layers(*registry); }
