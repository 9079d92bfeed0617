#pragma once
#include "convolution/convolution.h"
#include "plexus/registry.h"

namespace plexus::layers {

// ConvTranspose2d: the adjoint (transpose) of Conv2d, PyTorch's
// nn.ConvTranspose2d; the synthesis transform's upsampling layer. Each input
// pixel scatters a weighted kernel onto the output; with groups G and
// dilation d, input channel c of group g = c / (C/G) reaches the out/G
// output channels of that group:
//   y[n, g*out/G + o, a*s - p + i*d, b*s - p + j*d] += W[c, o, i, j] x[n, c, a, b]   (+ bias everywhere)
// input [N, C, H, W] -> output [N, out, Ho, Wo], Ho = (H - 1)s - 2p + d(k - 1) + 1 + output_padding.
// Parameters: weight [C, out/G, k, k], bias [out] (PyTorch layouts), both
// initialised U(-1/sqrt(out/G*k*k), 1/sqrt(out/G*k*k)) as in PyTorch (whose
// fan_in for this layout is weight.size(1)*k*k).
// For G = d = 1, with im2col of the OUTPUT geometry (out channels, Ho x Wo image, H x W
// kernel positions), per image, W viewed as [C, out*k*k]:
//   y = col2im(W^T x) + bias,   dx = W im2col(dy),
//   dW += x im2col(dy)^T,       dbias += sum_{pixels} dy.
// In convolution.h's terms X is the output and Y the input: the layer is the
// Conv2d from its output to its input, run backwards.
// output_padding only adds rows/columns at the bottom/right (they get the bias
// and whatever the kernel reaches), choosing among the sizes that a stride-s
// convolution maps back to H.
// Params: out_channels, kernel (square), stride = 1, padding = 0,
// output_padding = 0 (< max(stride, dilation)), groups = 1 (must divide C and
// out), dilation = 1, bias = true.
class ConvTranspose2d : public Convolution {
 public:
  explicit ConvTranspose2d(LayerConfig& config);
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
  // The im2col geometry of the output for input `input_shape` [N, C, H, W]:
  // image = [out, Ho, Wo], kernel positions = H x W.
  ConvGeometry geometry(const Shape& input_shape) const;
};

void register_conv_transpose2d(Registry& registry);

}  // namespace plexus::layers
