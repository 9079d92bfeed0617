#pragma once
// The element-wise layers, ReLU, LeakyReLU, Abs, Sigmoid, Tanh, GELU and
// Mul: one layer class that runs the formulas of its op (elementwise_ops.h),
// the CPU passes as one Eigen expression over the whole tensor
// (elementwise.cpp), the CUDA passes as one grid-stride kernel
// (elementwise.cu). An op of k inputs takes k tensors of one shape and
// writes one of that shape; a binary op's two inputs may also broadcast
// (broadcast.h: one rank, each size the output's or 1), each input's
// gradient then summed over the dimensions it is broadcast along. No
// parameters. On CUDA every input, output and
// gradient may be f32 or bf16, each in its own dtype, computed on in f32
// (activation_elements.cuh), or all f64; the CPU passes take f32 and f64.
#include <vector>

#include "elementwise/elementwise_ops.h"
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

class ElementwiseLayer final : public Layer {
 public:
  explicit ElementwiseLayer(elementwise::Op op) : op_(op) {}
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  // CUDA kernels, capturable; bf16 storage on CUDA; ReLU in place on the
  // CPU; ReLU and LeakyReLU (a slope >= 0) as fused activations.
  LayerTraits traits(Device device) const override;

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
  elementwise::Op op_;
};

// ReLU, LeakyReLU, Abs, Sigmoid, Tanh, GELU and Mul.
void register_elementwise(Registry& registry);

}  // namespace plexus::layers
