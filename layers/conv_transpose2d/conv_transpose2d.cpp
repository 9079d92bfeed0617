#include "conv_transpose2d/conv_transpose2d.h"

#include <algorithm>

namespace plexus::layers {

ConvTranspose2d::ConvTranspose2d(LayerConfig& config) : Convolution(config, ImageSide::kOutput) {
  // As PyTorch: output_padding < max(stride, dilation).
  if (output_padding_ >= std::max(stride_, dilation_))
    config.fail("output_padding", "must be < stride (" + std::to_string(stride_) + ")" +
                                      (dilation_ > 1 ? " or dilation (" + std::to_string(dilation_) + ")" : "") +
                                      ", got " + std::to_string(output_padding_));
}

std::vector<Shape> ConvTranspose2d::output_shapes(const std::vector<Shape>& inputs) const {
  const Shape& x = checked_input(inputs);
  const ConvGeometry g = geometry(x);
  check_column_size(x, g);
  if (g.height < 1 || g.width < 1)
    fail_shape("input " + shape_str(x) + " gives an empty output " +
               shape_str({x[0], out_channels_, g.height, g.width}) + ": (H - 1)*stride - 2*padding + " +
               (dilation_ > 1 ? "dilation*(kernel - 1) + 1" : "kernel") + " + output_padding must be >= 1");
  return {{x[0], out_channels_, g.height, g.width}};
}

ConvGeometry ConvTranspose2d::geometry(const Shape& input_shape) const {
  ConvGeometry g;
  g.channels = out_channels_;
  const std::int64_t reach = dilation_ * (kernel_ - 1) + 1;
  g.height = (input_shape[2] - 1) * stride_ - 2 * padding_ + reach + output_padding_;
  g.width = (input_shape[3] - 1) * stride_ - 2 * padding_ + reach + output_padding_;
  g.kernel = kernel_;
  g.stride = stride_;
  g.padding = padding_;
  g.dilation = dilation_;
  // A stride-s convolution of the output maps it back to H x W, since
  // (Ho + 2p - reach)/s + 1 = H - 1 + floor(output_padding/s) + 1 = H
  // (output_padding >= s, allowed when d > s, adds rows no patch reaches).
  g.patches_high = input_shape[2];
  g.patches_wide = input_shape[3];
  return g;
}

// y = col2im(W^T x) + bias: the backward_data of the Conv2d from y to x.
void ConvTranspose2d::forward_cpu(Context&, const ConstTensors& inputs, const MutableTensors& outputs) {
  conv_backward_data_cpu(*inputs[0], /*with_bias=*/true, forward_options().output_activation, *outputs[0],
                         forward_options().discard_input);
}

// With columns = im2col(dy): dx = W columns; dW += x columns^T; dbias += sums of dy.
void ConvTranspose2d::backward_cpu(Context&, const ConstTensors& inputs, const ConstTensors&,
                                   const ConstTensors& output_grads, const MutableTensors& input_grads) {
  conv_backward_cpu(*output_grads[0], *inputs[0], /*x_grad=*/nullptr, /*y_grad=*/input_grads[0]);
  accumulate_bias_grad_cpu(*output_grads[0]);
}

// CUDA ConvTranspose2d (math in conv_transpose2d.h): convolution.h's passes
// with X the output. So when the context allows TF32 or BF16 the
// implicit-GEMM tensor-core engine (convolution/implicit_gemm.h) runs this
// layer's forward as the engine's backward_data, its input gradient as the
// engine's forward and its weight gradient as the engine's backward_weight,
// where the engine takes the pass (a forward onto <= 4 channels, the RGB
// image a synthesis transform ends with, runs few_channel_conv.h's kernel);
// the others run cuBLAS plus col2im / im2col of the output geometry.
#if PLEXUS_WITH_CUDA
void ConvTranspose2d::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  conv_backward_data_cuda(ctx, *inputs[0], /*with_bias=*/true, forward_options().output_activation, *outputs[0]);
}

void ConvTranspose2d::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                                    const ConstTensors& output_grads, const MutableTensors& input_grads) {
  conv_backward_cuda(ctx, *output_grads[0], *inputs[0], /*x_grad=*/nullptr, /*y_grad=*/input_grads[0],
                     *output_grads[0]);
}
#endif  // PLEXUS_WITH_CUDA

void register_conv_transpose2d(Registry& registry) {
  registry.add(
      "ConvTranspose2d", [](LayerConfig& config) { return std::make_unique<ConvTranspose2d>(config); },
      "2-D transposed convolution (PyTorch ConvTranspose2d): weight [C, out/groups, k, k], bias [out]");
}

}  // namespace plexus::layers
