#include "sigmoid/sigmoid.h"

#include <Eigen/Core>

namespace plexus::layers {

Sigmoid::Sigmoid(LayerConfig&) {}

std::vector<Shape> Sigmoid::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  return {inputs[0]};
}

// 1 / (1 + exp(-x)) needs no branch for stability: exp(-x) overflows to
// +inf for very negative x, and 1 / inf = 0 is the right limit.
void Sigmoid::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Vector> x(inputs[0]->data<T>(), inputs[0]->numel());
    Eigen::Map<Vector> y(outputs[0]->data<T>(), outputs[0]->numel());
    y = T(1) / (T(1) + (-x).exp());
  });
}

void Sigmoid::backward_cpu(Context&, const ConstTensors&, const ConstTensors& outputs, const ConstTensors& output_grads,
                           const MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  dispatch_float(outputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Vector> y(outputs[0]->data<T>(), outputs[0]->numel());
    Eigen::Map<const Vector> dy(output_grads[0]->data<T>(), output_grads[0]->numel());
    Eigen::Map<Vector> dx(input_grads[0]->data<T>(), input_grads[0]->numel());
    dx = dy * y * (T(1) - y);
  });
}

void register_sigmoid(Registry& registry) {
  registry.add(
      "Sigmoid", [](LayerConfig& config) { return std::make_unique<Sigmoid>(config); },
      "y = 1 / (1 + exp(-x)), element-wise");
}

}  // namespace plexus::layers
