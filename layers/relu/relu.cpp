#include "relu/relu.h"

#include <Eigen/Core>

namespace plexus::layers {

ReLU::ReLU(LayerConfig&) {}

std::vector<Shape> ReLU::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  return {inputs[0]};
}

void ReLU::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Vector> x(inputs[0]->data<T>(), inputs[0]->numel());
    Eigen::Map<Vector> y(outputs[0]->data<T>(), outputs[0]->numel());
    y = x.max(T(0));
  });
}

void ReLU::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                        const MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Vector> x(inputs[0]->data<T>(), inputs[0]->numel());
    Eigen::Map<const Vector> dy(output_grads[0]->data<T>(), output_grads[0]->numel());
    Eigen::Map<Vector> dx(input_grads[0]->data<T>(), input_grads[0]->numel());
    dx = (x > T(0)).select(dy, T(0));
  });
}

void register_relu(Registry& registry) {
  registry.add(
      "ReLU", [](LayerConfig& config) { return std::make_unique<ReLU>(config); }, "y = max(x, 0), element-wise");
}

}  // namespace plexus::layers
