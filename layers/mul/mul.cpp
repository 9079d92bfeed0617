#include "mul/mul.h"

#include <Eigen/Core>

namespace plexus::layers {

Mul::Mul(LayerConfig&) {}

std::vector<Shape> Mul::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 2) fail_shape("takes 2 inputs, got " + std::to_string(inputs.size()));
  if (inputs[1] != inputs[0])
    fail_shape("input 1 is " + shape_str(inputs[1]) + " but input 0 is " + shape_str(inputs[0]) +
               "; Mul needs inputs of one shape");
  return {inputs[0]};
}

void Mul::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    const long long n = outputs[0]->numel();
    Eigen::Map<const Vector> a(inputs[0]->data<T>(), n), b(inputs[1]->data<T>(), n);
    Eigen::Map<Vector> y(outputs[0]->data<T>(), n);
    y = a * b;
  });
}

void Mul::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                       const MutableTensors& input_grads) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    const long long n = output_grads[0]->numel();
    Eigen::Map<const Vector> dy(output_grads[0]->data<T>(), n);
    for (int k = 0; k < 2; ++k) {  // dL/dx_k = dL/dy * x_(1-k)
      if (!input_grads[k]) continue;
      Eigen::Map<const Vector> other(inputs[1 - k]->data<T>(), n);
      Eigen::Map<Vector>(input_grads[k]->data<T>(), n) = dy * other;
    }
  });
}

void register_mul(Registry& registry) {
  registry.add(
      "Mul", [](LayerConfig& config) { return std::make_unique<Mul>(config); },
      "y = a * b, element-wise, two inputs of one shape (gating)");
}

}  // namespace plexus::layers
