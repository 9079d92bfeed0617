#pragma once
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// UniformNoise: the differentiable proxy for quantisation of Ballé et al.
// (2017), section 2.
//   training: y = x + u,  u ~ U(-0.5, 0.5) independently per element
//   eval:     y = round(x)  (halves away from zero, like std::round)
//   backward: dL/dx = dL/dy in both modes.
// Why straight-through: in training dy/dx = 1 is the exact derivative of
// x + u (the noise does not depend on x). In eval mode round() has derivative
// 0 almost everywhere, which would cut every gradient to the analysis
// transform; passing dy through unchanged (the straight-through estimator)
// keeps a useful signal should anyone backpropagate through the rounded model.
// Noise: CPU from ctx.random() (std::mt19937_64, 53 bits per double, so the
// values do not depend on the standard library's distributions); CUDA from
// cuda::device_random (Philox, seed read from device memory, so a replayed
// CUDA graph draws fresh noise after each reseed). Both restart with
// Context::reseed(), but the two devices draw different sequences.
class UniformNoise : public Layer {
 public:
  explicit UniformNoise(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
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
};

void register_uniform_noise(Registry& registry);

}  // namespace plexus::layers
