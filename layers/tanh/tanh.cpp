#include "tanh/tanh.h"

#include <Eigen/Core>
#include <cmath>

namespace plexus::layers {

Tanh::Tanh(LayerConfig& config) : scale_(config.number("scale", 1.0)) {
  if (!std::isfinite(scale_) || scale_ == 0)
    config.fail("scale", "must be a finite non-zero number, got " + std::to_string(scale_));
}

std::vector<Shape> Tanh::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 1) fail_shape("takes 1 input, got " + std::to_string(inputs.size()));
  return {inputs[0]};
}

void Tanh::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Vector> x(inputs[0]->data<T>(), inputs[0]->numel());
    Eigen::Map<Vector> y(outputs[0]->data<T>(), outputs[0]->numel());
    y = T(scale_) * x.tanh();
  });
}

// From the forward's output: tanh(x) = y / scale, so dx = dy * scale * (1 - (y / scale)^2).
void Tanh::backward_cpu(Context&, const ConstTensors&, const ConstTensors& outputs, const ConstTensors& output_grads,
                        const MutableTensors& input_grads) {
  if (!input_grads[0]) return;
  dispatch_float(outputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const Vector> y(outputs[0]->data<T>(), outputs[0]->numel());
    Eigen::Map<const Vector> dy(output_grads[0]->data<T>(), output_grads[0]->numel());
    Eigen::Map<Vector> dx(input_grads[0]->data<T>(), input_grads[0]->numel());
    const T scale = T(scale_);
    dx = dy * scale * (T(1) - (y / scale).square());
  });
}

void register_tanh(Registry& registry) {
  registry.add(
      "Tanh", [](LayerConfig& config) { return std::make_unique<Tanh>(config); }, "y = scale * tanh(x), element-wise");
}

}  // namespace plexus::layers
