#include "add/add.h"

#include <Eigen/Core>

#include "broadcast.h"
#include "fused_activation.h"
#include "plexus/tensor_ops.h"

namespace plexus::layers {

Add::Add(LayerConfig&) {}

std::vector<Shape> Add::output_shapes(const std::vector<Shape>& inputs) const {
  if (inputs.size() < 2) fail_shape("takes 2 or more inputs, got " + std::to_string(inputs.size()));
  const broadcast::BroadcastShape output = broadcast::broadcast_shape(inputs);
  if (!output.error.empty())
    fail_shape(output.error +
               "; Add needs inputs of one shape, or of one rank with each size the output's or 1 (broadcasting)");
  return {output.shape};
}

bool Add::broadcasts(const ConstTensors& inputs) {
  for (const Tensor* input : inputs)
    if (input->shape() != inputs[0]->shape()) return true;
  return false;
}

void Add::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Vector = Eigen::Array<T, Eigen::Dynamic, 1>;
    const long long n = outputs[0]->numel();
    Eigen::Map<Vector> y(outputs[0]->data<T>(), n);
    // Summed left to right, as the CUDA kernels do, so both devices round alike.
    if (broadcasts(inputs)) {
      const Shape& shape = outputs[0]->shape();
      const auto sum = [](T a, T b) { return a + b; };
      broadcast::forward_cpu(inputs[0]->data<T>(), inputs[1]->data<T>(), y.data(),
                             broadcast::forward_walk(inputs[0]->shape(), inputs[1]->shape(), shape), sum);
      for (std::size_t i = 2; i < inputs.size(); ++i)
        broadcast::forward_cpu(y.data(), inputs[i]->data<T>(), y.data(),
                               broadcast::forward_walk(shape, inputs[i]->shape(), shape), sum);
    } else {
      auto input = [&](std::size_t i) { return Eigen::Map<const Vector>(inputs[i]->data<T>(), n); };
      y = input(0) + input(1);
      for (std::size_t i = 2; i < inputs.size(); ++i) y += input(i);
    }
    apply_fused_activation(y, forward_options().output_activation);
  });
}

void Add::copy_output_grad(Context& ctx, const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Tensor& output_grad = *output_grads[0];
  for (Tensor* input_grad : input_grads) {
    if (!input_grad || input_grad->raw_data() == output_grad.raw_data()) continue;
    if (input_grad->shape() != output_grad.shape()) continue;  // a broadcast input: its gradient is a sum (backward)
    if (input_grad->dtype() == output_grad.dtype())
      copy_elements(ctx, *input_grad, 0, output_grad, 0, output_grad.numel());
    else convert(ctx, *input_grad, output_grad);
  }
}

// An input of y's shape: dL/dx_i = dL/dy; a broadcast one: dL/dy summed
// over the dimensions it is broadcast along.
void Add::backward_cpu(Context& ctx, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                       const MutableTensors& input_grads) {
  copy_output_grad(ctx, output_grads, input_grads);
  const Tensor& dy = *output_grads[0];
  for (std::size_t i = 0; i < input_grads.size(); ++i) {
    if (!input_grads[i] || input_grads[i]->shape() == dy.shape()) continue;
    dispatch_float(dy.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* dy_values = dy.data<T>();
      broadcast::reduce_cpu(input_grads[i]->data<T>(),
                            broadcast::reduction_walk(inputs[i]->shape(), dy.shape(), dy.shape()),
                            [&](long long, long long y_offset, long long) { return dy_values[y_offset]; });
    });
  }
}

void register_add(Registry& registry) {
  registry.add(
      "Add", [](LayerConfig& config) { return std::make_unique<Add>(config); },
      "y = x_0 + x_1 + ..., two or more inputs of one shape (residual connections), or broadcast along "
      "dimensions of size 1");
}

}  // namespace plexus::layers
