#pragma once
// Concat and Split: channels joined, and cut apart (each the other's backward).
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

// Split: cuts one input along channels (axis 1 of NCHW; any rank >= 2) into
// consecutive slices y_k = x[:, o_k : o_k + sizes[k]], o_k the sum of the
// earlier sizes; dL/dx is the slices' gradients joined back (an output that
// reaches no loss contributes zeros).
// Param: "sizes" (array of channel counts >= 1, summing to the input's C);
// one output per entry.
class Split : public Layer {
 public:
  explicit Split(LayerConfig& config);
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

 private:
  std::vector<std::int64_t> sizes_;
};

void register_concat_split(Registry& registry);  // Concat and Split

}  // namespace plexus::layers
