#pragma once
#include <array>
#include <cstdint>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// FactorizedEntropyModel: the per-channel learned density of Ballé, Minnen,
// Singh, Hwang, Johnston (2018), "Variational image compression with a scale
// hyperprior", appendix 6.1, with filters (3, 3, 3). Each channel has its own
// cumulative c = f_K o ... o f_1, K = 4 layers of widths 1 -> 3 -> 3 -> 3 -> 1:
//   f_k(x) = g_k(H^(k) x + b^(k)),
//   g_k(z) = z + a^(k) ∘ tanh(z)  for k < K,   g_K = sigmoid,
//   H^(k) = softplus(matrix_k) > 0,   a^(k) = tanh(factor_k) in (-1, 1),
// so every f_k is increasing and c rises from 0 to 1: a cumulative density.
//
// Output, element-wise with the element's channel: the likelihood of y,
//   p(y) = c(y + 1/2) - c(y - 1/2),
// computed on the logit side as tensorflow-compression and CompressAI do.
// With u, l the logits (the chain before the final sigmoid) at y + 1/2 and
// y - 1/2 and s = -sign(u + l):
//   p = |sigmoid(s u) - sigmoid(s l)|.
// This equals sigmoid(u) - sigmoid(l), but both sigmoids are taken on the tail
// side, where they are small and their difference keeps its digits (far in
// the upper tail sigmoid(u) - sigmoid(l) would be 1 - 1 = 0 in f32). At
// u + l = 0 exactly we take s = +1 (sign(0) = 0 would give p = 0).
// Finally y_out = max(p, likelihood_bound), whose gradient is tfc's
// LowerBound "identity if towards": dL/dp = dL/dy_out where p >= bound or
// where dL/dy_out < 0 (descent would raise p), and 0 otherwise.
//
// Backward: since u >= l (c increasing), dp/du = sigmoid'(u) and
// dp/dl = -sigmoid'(l); then back through both chains to y (dy/du = dy/dl = 1)
// and to every parameter, summed over the channel's elements:
//   dL/dmatrix_k = dL/dH^(k) ∘ sigmoid(matrix_k),  dL/dfactor_k = dL/da^(k) ∘ (1 - a^(k)^2).
//
// Input [N, C, ...] (rank >= 2, channel axis 1); output of the same shape.
// Parameters (names and shapes as in CompressAI's EntropyBottleneck):
//   matrix0..matrix3 [C, out_k, in_k], bias0..bias3 [C, out_k, 1],
//   factor0..factor2 [C, out_k, 1].
// Initialisation (tensorflow-compression / CompressAI, init_scale = 10):
//   scale = init_scale^(1/K); matrix_k = log(expm1(1 / scale / out_k)), so that
//   H^(k) = 1 / (scale out_k) and the initial chain is the ramp y / init_scale
//   plus offsets; bias_k ~ U(-0.5, 0.5); factor_k = 0.
// Params: filters = [3, 3, 3] (the only widths implemented), init_scale = 10
// (> 0), likelihood_bound = 1e-9 (in [0, 1)).
class FactorizedEntropyModel : public Layer {
 public:
  static constexpr int kLayers = 4;  // K
  static constexpr std::array<int, kLayers + 1> kWidths = {1, 3, 3, 3, 1};

  explicit FactorizedEntropyModel(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  void create_parameters(const std::vector<Shape>& inputs) override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
    return traits;
  }

  // C, once the parameters exist (-1 before).
  std::int64_t channels() const { return channels_; }
  // The logit of each channel's cumulative c (the chain before its final
  // sigmoid) at `points`, [C, per_channel] row-major: row c for channel c.
  // Computed in f64 on the CPU from the parameters, wherever they live; the
  // coding tables (plexus/codec/factorized_tables.h) are built from it.
  std::vector<double> cumulative_logits(const std::vector<double>& points, std::int64_t per_channel) const;

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
  double init_scale_;
  double likelihood_bound_;
  std::int64_t channels_ = -1;  // C, fixed once parameters are declared
  std::array<Parameter*, kLayers> matrix_{};
  std::array<Parameter*, kLayers> bias_{};
  std::array<Parameter*, kLayers - 1> factor_{};
};

void register_factorized_entropy_model(Registry& registry);

}  // namespace plexus::layers
