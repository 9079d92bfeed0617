#pragma once
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// CheckerboardMask: keeps one colour of a checkerboard over the positions of
// an [N, C, H, W] tensor and zeroes the other (He et al. 2021, "Checkerboard
// Context Model for Efficient Learned Image Compression"):
//   y[n, c, h, w] = x[n, c, h, w]   if (h + w) mod 2 = p
//                 = 0               otherwise
// with p = 0 for "keep": "even" and p = 1 for "odd". The even positions are
// a checkerboard codec's anchors (coded first, from the hyperprior alone),
// the odd ones its non-anchors (CompressAI's default anchor parity).
// Backward: dL/dx = dL/dy at the kept positions, 0 elsewhere.
// Param: "keep": "even" or "odd" (required).
class CheckerboardMask : public Layer {
 public:
  explicit CheckerboardMask(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
    return traits;
  }
  // The parity p of the positions kept: 0 (even) or 1 (odd).
  std::int64_t kept_parity() const { return parity_; }

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
  std::int64_t parity_ = 0;
};

void register_checkerboard_mask(Registry& registry);

}  // namespace plexus::layers
