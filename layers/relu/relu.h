#pragma once
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// ReLU: y = max(x, 0);  dL/dx = dL/dy * [x > 0].
// One input, one output of the same shape; no parameters.
class ReLU : public Layer {
 public:
  explicit ReLU(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  bool has_cuda() const override { return PLEXUS_WITH_CUDA; }
  bool cuda_graph_capturable() const override { return true; }
  // Element-wise: the CPU kernel reads x[i] and then writes y[i].
  bool forward_in_place(Device device) const override { return device.is_cpu(); }
  // On CUDA x, y and their gradients may each be f32 or bf16; the CPU kernels take f32 and f64.
  bool stores_bf16(Device device) const override { return device.is_cuda(); }
  // ReLU's derivative [x > 0] is [y > 0]: a convolution before it may apply it.
  FusedActivation as_fused_activation() const override { return {true, 0.0}; }

 protected:
  void forward_cpu(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) override;
  void backward_cpu(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                    const ConstTensors& output_grads, const MutableTensors& input_grads) override;
#if PLEXUS_WITH_CUDA
  void forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) override;
  void backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                     const ConstTensors& output_grads, const MutableTensors& input_grads) override;
#endif
};

void register_relu(Registry& registry);

}  // namespace plexus::layers
