#pragma once
#include "convolution/convolution.h"
#include "plexus/registry.h"

namespace plexus::layers {

// Conv2d: 2-D cross-correlation, PyTorch's nn.Conv2d. With groups G and
// dilation d, output channel o reads the C/G input channels of its group
// g = o / (out/G):
//   y[n, o, a, b] = bias[o] + sum_{c < C/G, i, j} W[o, c, i, j] x[n, g*C/G + c, a*s - p + i*d, b*s - p + j*d]
// input [N, C, H, W] -> output [N, out, Ho, Wo], Ho = (H + 2p - d(k - 1) - 1)/s + 1 (floor).
// Parameters: weight [out, C/G, k, k], bias [out] (PyTorch layouts), both
// initialised U(-1/sqrt(C/G*k*k), 1/sqrt(C/G*k*k)) as in PyTorch.
// For G = d = 1, as matrices, per image, with columns = im2col(x) [C*k*k, Ho*Wo]:
//   y = W columns + bias,   dW += dy columns^T,   dbias += sum_{a,b} dy,
//   dx = col2im(W^T dy).
// In convolution.h's terms X is the input and Y the output.
// Params: out_channels, kernel (square), stride = 1, padding = 0, groups = 1
// (must divide C and out), dilation = 1, bias = true, mask = "none". groups =
// C = out is a depthwise convolution.
// mask "A" or "B" (odd kernels): the raster-scan mask of PixelCNN (van den
// Oord et al. 2016), the context model of Minnen et al. 2018: tap (i, j) of
// every kernel is used only when i k + j < (k k - 1) / 2 ("A": the taps
// before the centre, so y at (a, b) reads only inputs above it, or left of it
// in its row) or <= (k k - 1) / 2 ("B": the centre too):
//   y = conv(x; W o M),   dW = M o (dy columns^T),   dx = col2im((W o M)^T dy),
// M the 0/1 mask. The weight's masked taps are held at 0: forward zeroes
// them (a value loaded or set there never enters), and backward adds nothing
// to their gradient, so an optimiser never moves them.
class Conv2d : public Convolution {
 public:
  explicit Conv2d(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;

 protected:
  void forward_cpu(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) override;
  void backward_cpu(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                    const ConstTensors& output_grads, const MutableTensors& input_grads) override;
#if PLEXUS_WITH_CUDA
  void forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) override;
  void backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                     const ConstTensors& output_grads, const MutableTensors& input_grads) override;
#endif

 private:
  // The im2col geometry of input `input_shape` [N, C, H, W].
  ConvGeometry geometry(const Shape& input_shape) const;
  // Zeroes the masked taps of the weight's value (no mask: nothing).
  void zero_masked_taps(Context& ctx, Tensor& weight) const;
  // The weight gradient's masked taps into masked_grad_ before backward
  // (to_saved) and back after it, so that backward adds nothing to them.
  void keep_masked_grad(Context& ctx, bool to_saved);
  Tensor masked_grad_;
  // The first masked tap of each kernel in raster order (k*k without a mask).
  std::int64_t first_masked_tap_;
};

void register_conv2d(Registry& registry);

}  // namespace plexus::layers
