#include "add/add.h"

#include <Eigen/Core>

#include "fused_activation.h"
#include "plexus/tensor_ops.h"

namespace plexus::layers {

Add::Add(LayerConfig&) {}

std::vector<Shape> Add::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() < 2) fail_shape("takes 2 or more inputs, got " + std::to_string(inputs.size()));
  for (std::size_t i = 1; i < inputs.size(); ++i)
    if (inputs[i] != inputs[0])
      fail_shape("input " + std::to_string(i) + " is " + shape_str(inputs[i]) + " but input 0 is " +
                 shape_str(inputs[0]) + "; Add needs inputs of one shape");
  return {inputs[0]};
}

void Add::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    const long long n = outputs[0]->numel();
    auto input = [&](std::size_t i) { return Eigen::Map<const Vector>(inputs[i]->data<T>(), n); };
    Eigen::Map<Vector> y(outputs[0]->data<T>(), n);
    // Summed left to right, as the CUDA kernels do, so both devices round alike.
    y = input(0) + input(1);
    for (std::size_t i = 2; i < inputs.size(); ++i) y += input(i);
    apply_fused_activation(y, activation_);
  });
}

void Add::copy_output_grad(Context& ctx, const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& output_grad = *output_grads[0];
  for (Tensor* input_grad : input_grads) {
    if (!input_grad || input_grad->raw_data() == output_grad.raw_data()) continue;
    if (input_grad->dtype() == output_grad.dtype())
      copy_elements(ctx, *input_grad, 0, output_grad, 0, output_grad.numel());
    else convert(ctx, *input_grad, output_grad);
  }
}

void Add::backward_cpu(Context& ctx, const ConstTensors&, const ConstTensors&, const ConstTensors& output_grads,
                       const MutableTensors& input_grads) {
  copy_output_grad(ctx, output_grads, input_grads);
}

void register_add(Registry& registry) {
  registry.add(
      "Add", [](LayerConfig& config) { return std::make_unique<Add>(config); },
      "y = x_0 + x_1 + ..., two or more inputs of one shape (residual connections)");
}

}  // namespace plexus::layers
