#pragma once
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// Add: y = sum_i x_i over two or more inputs of one shape;
// dL/dx_i = dL/dy for every input. Residual connections: y = x + F(x).
// Inputs may also broadcast (broadcast.h: one rank, each size the output's
// or 1, as a bias [1, C, 1, 1] added to [N, C, H, W]); the gradient of a
// broadcast input is dL/dy summed over the dimensions it is broadcast along.
// No parameters.
class Add : public Layer {
 public:
  explicit Add(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
    // On CUDA each input, y and their gradients may be f32 or bf16; the CPU kernels take f32 and f64.
    traits.stores_bf16 = device.is_cuda();
    // dL/dx_i = dL/dy for an input of y's shape: a Net lets its gradient share dL/dy's storage (no copy).
    traits.other_inputs_gradient = InputGradient::kOutputGrad;
    // Forward applies a fused activation (Net::set_activation_fusion: a ReLU
    // after a residual sum) to the sum as it writes y, broadcast or not;
    // backward reads no output.
    traits.applies_output_activation = true;
    return traits;
  }

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
  // Whether the inputs' shapes differ (they broadcast): the element-wise passes take inputs of one shape.
  static bool broadcasts(const ConstTensors& inputs);
  // dL/dx_i = dL/dy for every wanted input of y's shape, on the context's device, each
  // in its own dtype (a bf16 gradient from an f32 dL/dy rounded to nearest
  // even); an input gradient that shares dL/dy's storage is left as it is.
  void copy_output_grad(Context& ctx, const ConstTensors& output_grads, const MutableTensors& input_grads);

  // On CUDA, the partial sums of more than two inputs when y is bf16 (f32,
  // y's shape; allocated again only when that changes, so a recorded CUDA
  // graph stays valid).
  Tensor partial_sum_;
};

void register_add(Registry& registry);

}  // namespace plexus::layers
