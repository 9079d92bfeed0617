#include "abs/abs.h"

#include <Eigen/Core>

namespace plexus::layers {

Abs::Abs(LayerConfig&) {}

std::vector<Shape> Abs::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  return {inputs[0]};
}

void Abs::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Vector> x(inputs[0]->data<T>(), inputs[0]->numel());
    Eigen::Map<Vector>(outputs[0]->data<T>(), outputs[0]->numel()) = x.abs();
  });
}

void Abs::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                       const MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Vector> x(inputs[0]->data<T>(), inputs[0]->numel());
    Eigen::Map<const Vector> dy(output_grads[0]->data<T>(), output_grads[0]->numel());
    Eigen::Map<Vector> dx(input_grads[0]->data<T>(), input_grads[0]->numel());
    dx = (x > T(0)).select(dy, (x < T(0)).select(-dy, T(0)));
  });
}

void register_abs(Registry& registry) {
  registry.add(
      "Abs", [](LayerConfig& config) { return std::make_unique<Abs>(config); }, "y = |x|, element-wise");
}

}  // namespace plexus::layers
