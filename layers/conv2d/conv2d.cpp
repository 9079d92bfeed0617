#include "conv2d/conv2d.h"

#include <algorithm>

#include "convolution/channel_ops.h"

namespace plexus::layers {

Conv2d::Conv2d(LayerConfig& config) : Convolution(config, ImageSide::kInput), first_masked_tap_(kernel_ * kernel_) {
  const std::string mask = config.text("mask", "none");
  if (config.is_describing()) return;
  if (mask != "none" && mask != "A" && mask != "B")
    config.fail("mask", "must be \"none\", \"A\" (the raster-scan mask without the centre) or "
                        "\"B\" (with it), got \"" +
                            mask + "\"");
  if (mask == "none") return;
  if (kernel_ % 2 == 0)
    config.fail("mask",
                "a masked Conv2d needs an odd kernel (the mask is centred), got kernel " + std::to_string(kernel_));
  first_masked_tap_ = (kernel_ * kernel_ - 1) / 2 + (mask == "B" ? 1 : 0);
  parameter_gradients_inline_ = true;
}

void Conv2d::keep_masked_grad(Context& ctx, bool to_saved) {
  const std::int64_t taps = kernel_ * kernel_;
  if (first_masked_tap_ >= taps) return;
  Tensor& grad = parameter("weight").grad;
  const std::int64_t kernels = grad.numel() / taps;
  const Shape saved_shape{kernels, taps - first_masked_tap_};
  if (masked_grad_.shape() != saved_shape || masked_grad_.dtype() != grad.dtype() ||
      masked_grad_.device() != grad.device())
    masked_grad_ = Tensor(saved_shape, grad.dtype(), grad.device());
#if PLEXUS_WITH_CUDA
  if (grad.device().is_cuda()) {
    if (grad.dtype() == DType::f64)
      copy_kernel_taps_cuda(ctx, kernels, taps, first_masked_tap_, to_saved, grad.data<double>(),
                            masked_grad_.data<double>());
    else
      copy_kernel_taps_cuda(ctx, kernels, taps, first_masked_tap_, to_saved, grad.data<float>(),
                            masked_grad_.data<float>());
    return;
  }
#endif
  (void)ctx;
  dispatch_float(grad.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* w = grad.data<T>();
    T* saved = masked_grad_.data<T>();
    const std::int64_t kept = taps - first_masked_tap_;
    for (std::int64_t n = 0; n < kernels; ++n)
      for (std::int64_t t = 0; t < kept; ++t) {
        T& tap = w[n * taps + first_masked_tap_ + t];
        if (to_saved) saved[n * kept + t] = tap;
        else tap = saved[n * kept + t];
      }
  });
}

void Conv2d::zero_masked_taps(Context& ctx, Tensor& tensor) const {
  const std::int64_t taps = kernel_ * kernel_;
  if (first_masked_tap_ >= taps) return;
  const std::int64_t kernels = tensor.numel() / taps;
#if PLEXUS_WITH_CUDA
  if (tensor.device().is_cuda()) {
    if (tensor.dtype() == DType::f64)
      zero_kernel_taps_cuda(ctx, kernels, taps, first_masked_tap_, tensor.data<double>());
    else zero_kernel_taps_cuda(ctx, kernels, taps, first_masked_tap_, tensor.data<float>());
    return;
  }
#endif
  (void)ctx;
  dispatch_float(tensor.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* w = tensor.data<T>();
    for (std::int64_t n = 0; n < kernels; ++n) std::fill(w + n * taps + first_masked_tap_, w + (n + 1) * taps, T(0));
  });
}

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
void Conv2d::forward_cpu(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  zero_masked_taps(ctx, parameter("weight").value);
  conv_forward_cpu(*inputs[0], /*with_bias=*/true, forward_options().output_activation, *outputs[0],
                   forward_options().discard_input);
}

// dW += dy im2col(x)^T (masked taps kept); dbias += sums of dy; dx = col2im(W^T dy).
void Conv2d::backward_cpu(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                          const ConstTensors& output_grads, const MutableTensors& input_grads) {
  keep_masked_grad(ctx, /*to_saved=*/true);
  conv_backward_cpu(*inputs[0], *output_grads[0], /*x_grad=*/input_grads[0], /*y_grad=*/nullptr);
  accumulate_bias_grad_cpu(*output_grads[0]);
  keep_masked_grad(ctx, /*to_saved=*/false);
}

// CUDA Conv2d (math in conv2d.h): convolution.h's passes with X the input.
// When the context allows TF32 or BF16 the implicit-GEMM tensor-core engine
// (convolution/implicit_gemm.h) runs the passes it takes (the input gradient
// onto <= 4 channels, e.g. of the 3->128 layer on an RGB image, through
// few_channel_conv.h's kernel); the others run im2col + cuBLAS.
#if PLEXUS_WITH_CUDA
void Conv2d::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  zero_masked_taps(ctx, parameter("weight").value);
  conv_forward_cuda(ctx, *inputs[0], /*with_bias=*/true, forward_options().output_activation, *outputs[0]);
}

void Conv2d::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                           const ConstTensors& output_grads, const MutableTensors& input_grads) {
  keep_masked_grad(ctx, /*to_saved=*/true);
  conv_backward_cuda(ctx, *inputs[0], *output_grads[0], /*x_grad=*/input_grads[0], /*y_grad=*/nullptr,
                     *output_grads[0]);
  keep_masked_grad(ctx, /*to_saved=*/false);  // after the gradient, on the same stream (no branch when masked)
}
#endif  // PLEXUS_WITH_CUDA

void register_conv2d(Registry& registry) {
  registry.add(
      "Conv2d", [](LayerConfig& config) { return std::make_unique<Conv2d>(config); },
      "2-D convolution (PyTorch Conv2d): weight [out, C/groups, k, k], bias [out]; mask \"A\"/\"B\": raster-scan "
      "masked");
}

}  // namespace plexus::layers
