#pragma once
#include "convolution/im2col.h"
#include "convolution/implicit_gemm.h"
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// ConvTranspose2d: the adjoint (transpose) of Conv2d, PyTorch's
// nn.ConvTranspose2d (groups = dilation = 1); the synthesis transform's
// upsampling layer. Each input pixel scatters a weighted kernel onto the output:
//   y[n, o, a*s - p + i, b*s - p + j] += W[c, o, i, j] x[n, c, a, b]   (+ bias[o] everywhere)
// input [N, C, H, W] -> output [N, out, Ho, Wo], Ho = (H - 1)s - 2p + k + output_padding.
// Parameters: weight [C, out, k, k], bias [out] (PyTorch layouts), both
// initialised U(-1/sqrt(out*k*k), 1/sqrt(out*k*k)) as in PyTorch (whose fan_in
// for this layout is weight.size(1)*k*k).
// With im2col of the OUTPUT geometry (out channels, Ho x Wo image, H x W
// kernel positions), per image, W viewed as [C, out*k*k]:
//   y = col2im(W^T x) + bias,   dx = W im2col(dy),
//   dW += x im2col(dy)^T,       dbias += sum_{pixels} dy.
// output_padding only adds rows/columns at the bottom/right (they get the bias
// and whatever the kernel reaches), choosing among the sizes that a stride-s
// convolution maps back to H.
// Params: out_channels, kernel (square), stride = 1, padding = 0,
// output_padding = 0 (< stride), bias = true.
class ConvTranspose2d : public Layer {
 public:
  explicit ConvTranspose2d(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  void create_parameters(const std::vector<Shape>& inputs) override;
  bool has_cuda() const override { return PLEXUS_WITH_CUDA; }
  bool cuda_graph_capturable() const override { return true; }
  // Caps the CUDA scratch (column buffer plus per-image weight gradients); a
  // batch whose scratch would exceed it runs in chunks of images (default
  // 512 MiB; tests lower it to exercise the chunking).
  void set_scratch_limit(std::size_t bytes) { scratch_limit_ = bytes; }

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
  // Images per CUDA chunk: their columns and per-image weight gradients fit
  // in scratch_limit_. The same in forward and backward, so the cached
  // scratch keeps its shape.
  std::int64_t images_per_cuda_chunk(const Shape& input_shape, std::size_t element_size) const;
  // This layer as the Conv2d from its output to its input, for the tensor-core engine (CUDA only).
  implicit_gemm::ConvProblem conv_problem(const Shape& input_shape) const;

  std::int64_t out_channels_;
  std::int64_t kernel_;
  std::int64_t stride_;
  std::int64_t padding_;
  std::int64_t output_padding_;
  bool has_bias_;
  std::size_t scratch_limit_ = std::size_t(512) << 20;
  Shape weight_shape_;  // set by create_parameters; empty before
  // CUDA scratch, kept between calls (see convolution/scratch.h).
  Tensor columns_;       // [images per chunk, out*k*k, H*W]
  Tensor weight_grads_;  // [images per chunk, C, out*k*k]: per-image dW, summed into weight.grad
  implicit_gemm::Scratch tensor_core_scratch_;  // the engine's packed weights, NHWC copies, partial sums
};

void register_conv_transpose2d(Registry& registry);

}  // namespace plexus::layers
