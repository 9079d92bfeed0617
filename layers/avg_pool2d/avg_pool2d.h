#pragma once
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// AvgPool2d, PyTorch's torch.nn.AvgPool2d(k, s, p) with its defaults
// (count_include_pad=True, ceil_mode=False): x [N, C, H, W] -> y [N, C, Ho, Wo],
//   Ho = floor((H + 2p - k) / s) + 1   (Wo likewise),
//   y[n, c, oh, ow] = 1/(k*k) * sum_{0 <= u, v < k} x[n, c, oh*s - p + u, ow*s - p + v],
// the x outside the image counting as 0 and in the divisor (always k*k). Its
// backward spreads each dy evenly over its window:
//   dx[n, c, h, w] = 1/(k*k) * sum over the (oh, ow) whose window holds (h, w) of dy[n, c, oh, ow].
// Params: "kernel" k (1 to 4096, required), "stride" s (1 to 4096, default
// k), "padding" p (0 to k/2, as PyTorch allows, default 0).
class AvgPool2d : public Layer {
 public:
  explicit AvgPool2d(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
    // On CUDA x, y and their gradients may each be f32 or bf16 (summed in f32); the CPU kernels take f32 and f64.
    traits.stores_bf16 = device.is_cuda();
    return traits;
  }

  // The sizes the kernels take.
  struct Geometry {
    std::int64_t planes, height, width;  // N*C, H, W of x
    std::int64_t out_height, out_width;  // Ho, Wo
    std::int64_t kernel, stride, padding;
  };

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
  Geometry geometry(const Shape& input) const;
  std::int64_t kernel_;
  std::int64_t stride_;
  std::int64_t padding_;
};

void register_avg_pool2d(Registry& registry);

}  // namespace plexus::layers
