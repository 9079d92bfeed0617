#pragma once
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// Softmax along one axis of its input (any rank >= 1). With the input seen as
// [outer, L, inner], L its size along the axis:
//   y[o, l, i] = exp(x[o, l, i] - m[o, i]) / sum_l' exp(x[o, l', i] - m[o, i]),  m[o, i] = max_l x[o, l, i]
// (subtracting the maximum keeps exp() from overflowing; it cancels in the ratio).
// Backward, from the forward's output y:
//   dx[o, l, i] = y[o, l, i] * (dy[o, l, i] - sum_l' dy[o, l', i] * y[o, l', i])
// Param: "axis" (integer, default 1: the channels of NCHW; a negative axis
// counts from the end, -1 being the last). One output of the input's shape; no
// parameters.
class Softmax : public Layer {
 public:
  explicit Softmax(LayerConfig& config);
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
  // A shape seen as [outer, L, inner] around the softmax axis.
  struct Lines {
    std::int64_t outer = 1;
    std::int64_t length = 1;
    std::int64_t inner = 1;
  };
  // The axis in [0, rank) for an input of `rank` dimensions, or a ShapeError
  // naming the axis and the shape.
  int resolved_axis(const Shape& shape) const;
  Lines lines_of(const Shape& shape) const;
  std::int64_t axis_;  // as given: negative counts from the end
};

void register_softmax(Registry& registry);

}  // namespace plexus::layers
