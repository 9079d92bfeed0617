#include "mse_loss/mse_loss.h"

#include <Eigen/Core>

namespace plexus::layers {

MSELoss::MSELoss(LayerConfig&) {}

std::vector<Shape> MSELoss::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() != 2) fail_shape("takes 2 inputs (a, b), got " + std::to_string(inputs.size()));
  if (inputs[0] != inputs[1])
    fail_shape("input a " + shape_str(inputs[0]) + " and input b " + shape_str(inputs[1]) +
               " must have the same shape");
  if (shape_numel(inputs[0]) == 0)
    fail_shape("inputs " + shape_str(inputs[0]) + " are empty; the mean of no elements is undefined");
  return {Shape{}};
}

void MSELoss::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    const Eigen::Index n = inputs[0]->numel();
    Eigen::Map<const Vector> a(inputs[0]->data<T>(), n);
    Eigen::Map<const Vector> b(inputs[1]->data<T>(), n);
    // Summed in f64 so that an f32 loss over millions of pixels keeps its digits.
    double sum = (a - b).square().template cast<double>().sum();
    outputs[0]->data<T>()[0] = static_cast<T>(sum / static_cast<double>(n));
  });
}

void MSELoss::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                           const ConstTensors& output_grads, const MutableTensors& input_grads) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    const Eigen::Index n = inputs[0]->numel();
    Eigen::Map<const Vector> a(inputs[0]->data<T>(), n);
    Eigen::Map<const Vector> b(inputs[1]->data<T>(), n);
    const T scale = output_grads[0]->data<T>()[0] * T(2) / static_cast<T>(n);
    if (input_grads[0]) Eigen::Map<Vector>(input_grads[0]->data<T>(), n) = scale * (a - b);
    if (input_grads[1]) Eigen::Map<Vector>(input_grads[1]->data<T>(), n) = scale * (b - a);
  });
}

void register_mse_loss(Registry& registry) {
  registry.add(
      "MSELoss", [](LayerConfig& config) { return std::make_unique<MSELoss>(config); },
      "mean((a - b)^2) of two equal-shaped inputs, a scalar");
}

}  // namespace plexus::layers
