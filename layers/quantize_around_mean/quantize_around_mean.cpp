#include "quantize_around_mean/quantize_around_mean.h"

#include <cmath>

namespace plexus::layers {

namespace {

// A double uniform on [0, 1) from the top 53 bits of one 64-bit draw: exact
// multiples of 2^-53, the same on every standard library (as UniformNoise).
double unit_uniform(std::mt19937_64& random) { return static_cast<double>(random() >> 11) * 0x1.0p-53; }

bool read_synthesis(LayerConfig& config) {
  const std::string synthesis = config.text("synthesis", "noise");
  if (synthesis != "noise" && synthesis != "straight_through")
    config.fail("synthesis", "must be \"noise\" or \"straight_through\", got \"" + synthesis + "\"");
  return synthesis == "straight_through";
}

// out = round(y - mu) + mu
template <typename T>
void round_around_mean(const T* y, const T* mu, T* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = std::round(y[i] - mu[i]) + mu[i];
}

}  // namespace

QuantizeAroundMean::QuantizeAroundMean(LayerConfig& config) : straight_through_(read_synthesis(config)) {}

std::vector<Shape> QuantizeAroundMean::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 2) fail_shape("takes 2 inputs (y, means), got " + std::to_string(inputs.size()));
  if (inputs[1] != inputs[0])
    fail_shape("input 1 (means) " + shape_str(inputs[1]) + " must have the shape of y " + shape_str(inputs[0]));
  if (straight_through_) return {inputs[0], inputs[0]};
  return {inputs[0]};
}

void QuantizeAroundMean::forward_cpu(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t n = inputs[0]->numel();
    const T* y = inputs[0]->data<T>();
    const T* mu = inputs[1]->data<T>();
    T* y_hat = outputs[0]->data<T>();
    if (ctx.training()) {
      std::mt19937_64& random = ctx.random();
      for (std::int64_t i = 0; i < n; ++i) y_hat[i] = y[i] + static_cast<T>(unit_uniform(random) - 0.5);
    } else {
      round_around_mean(y, mu, y_hat, n);
    }
    if (straight_through_) round_around_mean(y, mu, outputs[1]->data<T>(), n);
  });
}

void QuantizeAroundMean::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                      const ConstTensors& output_grads, const MutableTensors& input_grads) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t n = inputs[0]->numel();
    if (Tensor* y_grad = input_grads[0]) {
      const T* g = output_grads[0]->data<T>();
      const T* g_st = straight_through_ ? output_grads[1]->data<T>() : nullptr;
      T* dy = y_grad->data<T>();
      for (std::int64_t i = 0; i < n; ++i) dy[i] = g_st ? g[i] + g_st[i] : g[i];
    }
    if (Tensor* mean_grad = input_grads[1]) {
      T* dmu = mean_grad->data<T>();
      for (std::int64_t i = 0; i < n; ++i) dmu[i] = T(0);
    }
  });
}

void register_quantize_around_mean(Registry& registry) {
  registry.add(
      "QuantizeAroundMean", [](LayerConfig& config) { return std::make_unique<QuantizeAroundMean>(config); },
      "inputs (y, means); training: y_hat = y + U(-0.5, 0.5) noise; eval: y_hat = round(y - means) + means; "
      "\"synthesis\": \"straight_through\" adds a second output round(y - means) + means; gradient passes "
      "straight through to y, none to the means");
}

}  // namespace plexus::layers
