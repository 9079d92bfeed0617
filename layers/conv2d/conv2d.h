#pragma once
#include "convolution/im2col.h"
#include "convolution/implicit_gemm.h"
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// Conv2d: 2-D cross-correlation, PyTorch's nn.Conv2d (groups = dilation = 1):
//   y[n, o, a, b] = bias[o] + sum_{c, i, j} W[o, c, i, j] x[n, c, a*s - p + i, b*s - p + j]
// input [N, C, H, W] -> output [N, out, Ho, Wo], Ho = (H + 2p - k)/s + 1 (floor).
// Parameters: weight [out, C, k, k], bias [out] (PyTorch layouts), both
// initialised U(-1/sqrt(C*k*k), 1/sqrt(C*k*k)) as in PyTorch.
// As matrices, per image, with columns = im2col(x) [C*k*k, Ho*Wo]:
//   y = W columns + bias,   dW += dy columns^T,   dbias += sum_{a,b} dy,
//   dx = col2im(W^T dy).
// Params: out_channels, kernel (square), stride = 1, padding = 0, bias = true.
class Conv2d : public Layer {
 public:
  explicit Conv2d(LayerConfig& config);
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
  // The im2col geometry of input `input_shape` [N, C, H, W].
  ConvGeometry geometry(const Shape& input_shape) const;
  // Images per CUDA chunk: their columns and per-image weight gradients fit
  // in scratch_limit_. The same in forward and backward, so the cached
  // scratch keeps its shape.
  std::int64_t images_per_cuda_chunk(const Shape& input_shape, std::size_t element_size) const;
  // The tensor-core engine's description of this layer on `input_shape` (CUDA only).
  implicit_gemm::ConvProblem conv_problem(const Shape& input_shape) const;

  std::int64_t out_channels_;
  std::int64_t kernel_;
  std::int64_t stride_;
  std::int64_t padding_;
  bool has_bias_;
  std::size_t scratch_limit_ = std::size_t(512) << 20;
  Shape weight_shape_;  // set by create_parameters; empty before
  // CUDA scratch, kept between calls (see scratch.h).
  Tensor columns_;       // [images per chunk, C*k*k, Ho*Wo]
  Tensor weight_grads_;  // [images per chunk, out, C*k*k]: per-image dW, summed into weight.grad
  implicit_gemm::Scratch tensor_core_scratch_;  // the engine's packed weights, NHWC copies, partial sums
};

void register_conv2d(Registry& registry);

}  // namespace plexus::layers
