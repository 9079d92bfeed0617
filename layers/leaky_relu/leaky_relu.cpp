#include "leaky_relu/leaky_relu.h"

#include <cmath>

#include <Eigen/Core>

namespace plexus::layers {

LeakyReLU::LeakyReLU(LayerConfig& config) : negative_slope_(config.number("negative_slope", 0.01)) {
  if (!std::isfinite(negative_slope_))
    config.fail("negative_slope", "must be a finite number, got " + std::to_string(negative_slope_));
}

std::vector<Shape> LeakyReLU::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  return {inputs[0]};
}

void LeakyReLU::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Vector> x(inputs[0]->data<T>(), inputs[0]->numel());
    Eigen::Map<Vector> y(outputs[0]->data<T>(), outputs[0]->numel());
    y = (x > T(0)).select(x, T(negative_slope_) * x);
  });
}

void LeakyReLU::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                             const ConstTensors& output_grads, const MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Vector> x(inputs[0]->data<T>(), inputs[0]->numel());
    Eigen::Map<const Vector> dy(output_grads[0]->data<T>(), output_grads[0]->numel());
    Eigen::Map<Vector> dx(input_grads[0]->data<T>(), input_grads[0]->numel());
    dx = (x > T(0)).select(dy, T(negative_slope_) * dy);
  });
}

void register_leaky_relu(Registry& registry) {
  registry.add(
      "LeakyReLU", [](LayerConfig& config) { return std::make_unique<LeakyReLU>(config); },
      "y = x for x > 0, negative_slope * x otherwise, element-wise");
}

}  // namespace plexus::layers
