#pragma once
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// PixelShuffle (depth-to-space), in PyTorch's channel order: with
// r = upscale_factor, an input [N, C*r*r, H, W] becomes [N, C, H*r, W*r] with
//   y[n, c, h*r + i, w*r + j] = x[n, c*r*r + i*r + j, h, w]   (0 <= i, j < r);
// the backward is the inverse gather (space-to-depth of dL/dy).
// Param: "upscale_factor" (integer in [1, 64], required).
class PixelShuffle : public Layer {
 public:
  explicit PixelShuffle(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
    // On CUDA x, y and their gradients may each be f32 or bf16; the CPU kernels take f32 and f64.
    traits.stores_bf16 = device.is_cuda();
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
  std::int64_t upscale_factor_;
};

void register_pixel_shuffle(Registry& registry);

}  // namespace plexus::layers
