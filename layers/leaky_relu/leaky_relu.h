#pragma once
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// LeakyReLU: y = x for x > 0, y = negative_slope * x otherwise;
// dL/dx = dL/dy for x > 0, negative_slope * dL/dy otherwise.
// Param: "negative_slope" (number, default 0.01, as PyTorch's LeakyReLU).
// One input, one output of the same shape.
class LeakyReLU : public Layer {
 public:
  explicit LeakyReLU(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  bool has_cuda() const override { return PLEXUS_WITH_CUDA; }
  bool cuda_graph_capturable() const override { return true; }
  // On CUDA x, y and their gradients may each be f32 or bf16; the CPU kernels take f32 and f64.
  bool stores_bf16(Device device) const override { return device.is_cuda(); }
  // With negative_slope >= 0 the derivative's [x > 0] is [y > 0]: a
  // convolution before it may apply it. A negative slope flips the sign.
  FusedActivation as_fused_activation() const override {
    return negative_slope_ >= 0 ? FusedActivation{true, negative_slope_} : FusedActivation{};
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
  double negative_slope_;
};

void register_leaky_relu(Registry& registry);

}  // namespace plexus::layers
