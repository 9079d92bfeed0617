#pragma once
#include <array>
#include <cstdint>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// MSSSIM: the multi-scale structural similarity of two images x, y [N, C, H, W]
// with values in [0, 1] (Wang, Simoncelli and Bovik 2003), as CompressAI trains
// with it (pytorch_msssim's ms_ssim, data_range 1), a scalar {}:
//   per scale s = 0..4, with x_0 = x and x_{s+1} = avg_pool_2x2(x_s) (a side of
//   odd length padded by one zero on each end, each output the sum of its 2x2
//   window over 4, so a side L becomes (L + 1) / 2), and G the normalised
//   Gaussian window of 11 taps, sigma 1.5, applied separably without padding:
//     mu_x = G*x, mu_y = G*y, s_xx = G*(x x) - mu_x^2, s_yy = G*(y y) - mu_y^2,
//     s_xy = G*(x y) - mu_x mu_y
//     cs   = (2 s_xy + C2) / (s_xx + s_yy + C2)
//     l    = (2 mu_x mu_y + C1) / (mu_x^2 + mu_y^2 + C1),  C1 = 0.01^2, C2 = 0.03^2
//     CS_s = mean over the filtered positions of cs;  S_4 = mean of l cs at scale 4
//   per image n and channel c:
//     M_nc = prod_{s<4} relu(CS_s)^w_s * relu(S_4)^w_4,
//     w = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)
//   output = mean over n, c of M_nc (1 for x = y).
// Gradients to both inputs (x the reconstruction, y the target):
//   dM/dCS_s = w_s M / CS_s, dM/dS_4 = w_4 M / S_4 (0 where a factor is <= 0),
//   through the per-position maps and the transposed filter and pooling.
// Every side must be at least kMsSsimMinSide (161), so that the fifth scale
// still holds a whole window. No parameters.
inline constexpr int kMsSsimScales = 5;
inline constexpr int kMsSsimWindow = 11;
inline constexpr double kMsSsimSigma = 1.5;
inline constexpr double kMsSsimC1 = 0.01 * 0.01;
inline constexpr double kMsSsimC2 = 0.03 * 0.03;
inline constexpr double kMsSsimWeights[kMsSsimScales] = {0.0448, 0.2856, 0.3001, 0.2363, 0.1333};
// A side of (kMsSsimWindow - 1) * 2^4 + 1 pools to kMsSsimWindow at the fifth scale.
inline constexpr std::int64_t kMsSsimMinSide = (kMsSsimWindow - 1) * 16 + 1;

// The Gaussian window: g_k = exp(-(k - 5)^2 / (2 sigma^2)), normalised to sum 1.
std::array<double, kMsSsimWindow> ms_ssim_window();

// The side lengths of the scales: side_0 = side, side_{s+1} = (side_s + 1) / 2.
std::array<std::int64_t, kMsSsimScales> ms_ssim_sides(std::int64_t side);

class MSSSIM : public Layer {
 public:
  explicit MSSSIM(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    // Scratch is allocated only when the shape changes; every value stays on the device.
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
#if PLEXUS_WITH_CUDA
  Tensor scratch_;  // CUDA: the pyramids, filtered maps, partial sums and per-plane statistics
#endif
};

void register_ms_ssim(Registry& registry);

}  // namespace plexus::layers
