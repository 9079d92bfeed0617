#pragma once
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// Mul: y = a * b, element-wise, for two inputs of one shape;
// dL/da = dL/dy * b,  dL/db = dL/dy * a. Gating (attention masks, as in
// Cheng et al. 2020's attention module: x * sigmoid(mask)). No parameters.
class Mul : public Layer {
 public:
  explicit Mul(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  bool has_cuda() const override { return PLEXUS_WITH_CUDA; }
  bool cuda_graph_capturable() const override { return true; }
  // On CUDA a, b, y and their gradients may each be f32 or bf16; the CPU kernels take f32 and f64.
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

void register_mul(Registry& registry);

}  // namespace plexus::layers
