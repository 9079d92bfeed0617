#include "uniform_noise/uniform_noise.h"

#include <cmath>

#include <Eigen/Core>

namespace plexus::layers {

namespace {

// A double uniform on [0, 1) from the top 53 bits of one 64-bit draw: exact
// multiples of 2^-53, the same on every standard library.
double unit_uniform(std::mt19937_64& random) { return static_cast<double>(random() >> 11) * 0x1.0p-53; }

}  // namespace

UniformNoise::UniformNoise(LayerConfig&) {}

std::vector<Shape> UniformNoise::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  return {inputs[0]};
}

void UniformNoise::forward_cpu(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::int64_t n = inputs[0]->numel();
    const T* x = inputs[0]->data<T>();
    T* y = outputs[0]->data<T>();
    if (ctx.training()) {
      std::mt19937_64& random = ctx.random();
      for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] + static_cast<T>(unit_uniform(random) - 0.5);
    } else {
      for (std::int64_t i = 0; i < n; ++i) y[i] = std::round(x[i]);
    }
  });
}

void UniformNoise::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    const Eigen::Index n = inputs[0]->numel();
    Eigen::Map<Vector>(input_grads[0]->data<T>(), n) = Eigen::Map<const Vector>(output_grads[0]->data<T>(), n);
  });
}

void register_uniform_noise(Registry& registry) {
  registry.add(
      "UniformNoise", [](LayerConfig& config) { return std::make_unique<UniformNoise>(config); },
      "training: y = x + U(-0.5, 0.5) noise; eval: y = round(x); gradient passes straight through");
}

}  // namespace plexus::layers
