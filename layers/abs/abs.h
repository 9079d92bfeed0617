#pragma once
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// Abs: y = |x|;  dL/dx = dL/dy * sign(x), with sign(0) = 0 (the subgradient
// PyTorch's abs uses). The hyper-analysis of the scale hyperprior starts
// with it (Ballé et al. 2018: the scales depend only on the magnitudes).
// One input, one output of the same shape; no parameters.
class Abs : public Layer {
 public:
  explicit Abs(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  bool has_cuda() const override { return PLEXUS_WITH_CUDA; }
  bool cuda_graph_capturable() const override { return true; }
  // On CUDA x, y and their gradients may each be f32 or bf16; the CPU kernels take f32 and f64.
  bool stores_bf16(Device device) const override { return device.is_cuda(); }

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

void register_abs(Registry& registry);

}  // namespace plexus::layers
