#pragma once
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// Concat: joins two or more inputs along channels (axis 1 of NCHW; any rank
// >= 2, every other dimension equal): y[:, o_k : o_k + C_k] = x_k, with o_k
// the sum of the earlier inputs' channels;  dL/dx_k = dL/dy[:, o_k : o_k + C_k].
// No parameters.
class Concat : public Layer {
 public:
  explicit Concat(LayerConfig& config);
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

void register_concat(Registry& registry);

}  // namespace plexus::layers
