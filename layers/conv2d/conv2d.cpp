#include "conv2d/conv2d.h"

namespace plexus::layers {

Conv2d::Conv2d(LayerConfig& config) : Convolution(config, ImageSide::kInput) {}

std::vector<Shape> Conv2d::output_shapes(const std::vector<Shape>& inputs) const {
  const Shape& x = checked_input(inputs);
  const std::int64_t reach = dilation_ * (kernel_ - 1) + 1;  // the rows (columns) one output pixel reads
  if (x[2] + 2 * padding_ < reach || x[3] + 2 * padding_ < reach)
    fail_shape("input " + shape_str(x) + " with padding " + std::to_string(padding_) + " is smaller than the " +
               std::to_string(kernel_) + "x" + std::to_string(kernel_) + " kernel" +
               (dilation_ > 1 ? " at dilation " + std::to_string(dilation_) + " (" + std::to_string(reach) + "x" +
                                    std::to_string(reach) + ")"
                              : std::string()) +
               ": the output would be empty");
  const ConvGeometry g = geometry(x);
  check_column_size(x, g);
  return {{x[0], out_channels_, g.patches_high, g.patches_wide}};
}

ConvGeometry Conv2d::geometry(const Shape& input_shape) const {
  ConvGeometry g;
  g.channels = input_shape[1];
  g.height = input_shape[2];
  g.width = input_shape[3];
  g.kernel = kernel_;
  g.stride = stride_;
  g.padding = padding_;
  g.dilation = dilation_;
  const std::int64_t reach = dilation_ * (kernel_ - 1) + 1;
  g.patches_high = (g.height + 2 * padding_ - reach) / stride_ + 1;
  g.patches_wide = (g.width + 2 * padding_ - reach) / stride_ + 1;
  return g;
}

// y = W im2col(x) + bias.
void Conv2d::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  conv_forward_cpu(*inputs[0], /*with_bias=*/true, forward_options().output_activation, *outputs[0],
                   forward_options().discard_input);
}

// dW += dy im2col(x)^T; dbias += sums of dy; dx = col2im(W^T dy).
void Conv2d::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                          const MutableTensors& input_grads) {
  conv_backward_cpu(*inputs[0], *output_grads[0], /*x_grad=*/input_grads[0], /*y_grad=*/nullptr);
  accumulate_bias_grad_cpu(*output_grads[0]);
}

// CUDA Conv2d (math in conv2d.h): convolution.h's passes with X the input.
// When the context allows TF32 or BF16 the implicit-GEMM tensor-core engine
// (convolution/implicit_gemm.h) runs the passes it takes (the input gradient
// onto <= 4 channels, e.g. of the 3->128 layer on an RGB image, through
// few_channel_conv.h's kernel); the others run im2col + cuBLAS.
#if PLEXUS_WITH_CUDA
void Conv2d::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  conv_forward_cuda(ctx, *inputs[0], /*with_bias=*/true, forward_options().output_activation, *outputs[0]);
}

void Conv2d::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                           const ConstTensors& output_grads, const MutableTensors& input_grads) {
  conv_backward_cuda(ctx, *inputs[0], *output_grads[0], /*x_grad=*/input_grads[0], /*y_grad=*/nullptr,
                     *output_grads[0]);
}
#endif  // PLEXUS_WITH_CUDA

void register_conv2d(Registry& registry) {
  registry.add(
      "Conv2d", [](LayerConfig& config) { return std::make_unique<Conv2d>(config); },
      "2-D convolution (PyTorch Conv2d): weight [out, C/groups, k, k], bias [out]");
}

}  // namespace plexus::layers
