#pragma once
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// GainUnit: a per-channel gain chosen by a continuous rate level, as in Cui et
// al. 2021, "Asymmetric gained deep image compression with continuous rate
// adaptation" (exponential interpolation between adjacent gain vectors).
//   inputs:  x [N, C, ...] (channel axis 1, any rank >= 2; "spatial" = the
//            dimensions after C), level [N] (a position in [0, K-1] per sample)
//   params:  levels K (integer >= 2, required); init (optional, K numbers:
//            the initial log-gain of level k for every channel; default all 0)
//   parameter: log_gains [K, C], log_gains[k, c] = init[k] at creation
// Per sample n:
//   q = clamp(level[n], 0, K-1),  i = min(floor(q), K-2),  t = q - i
//   s[n, c] = (1-t) log_gains[i, c] + t log_gains[i+1, c]
//   y[n, c, ...] = x[n, c, ...] exp(s[n, c])
// so gain = g_i^(1-t) g_(i+1)^t, and at an integer q it is exactly level q's.
// Backward, with S[n, c] = sum over spatial positions of dy x:
//   dx = dy exp(s)
//   dlog_gains[i, c]   += (1-t) exp(s[n, c]) S[n, c]
//   dlog_gains[i+1, c] += t     exp(s[n, c]) S[n, c]     (summed over n)
// level carries no gradient (InputGradient::kNone in its traits; a gradient
// tensor passed for it anyway is zeroed): it is the rate the caller asks for,
// not something to learn, and y is not differentiable in it at the integers
// (dy/dq = y (log_gains[i+1, c] - log_gains[i, c]) jumps there) nor outside
// [0, K-1], where the clamp makes it 0.
class GainUnit : public Layer {
 public:
  explicit GainUnit(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  void create_parameters(const std::vector<Shape>& inputs) override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.input_gradients = {InputGradient::kComputed};
    traits.other_inputs_gradient = InputGradient::kNone;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    // The CUDA backward's scratch tensor is allocated only when the shape changes.
    traits.cuda_graph_capturable = true;
    return traits;
  }

  std::int64_t levels() const { return levels_; }

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
  std::int64_t levels_;
  std::vector<double> initial_log_gains_;  // K values
  // C the parameter was created for (0 before create_parameters); a later
  // input with another C is refused in output_shapes.
  std::int64_t channels_ = 0;
  Tensor scaled_sums_;  // [N, C] scratch of the CUDA backward: exp(s) S
};

void register_gain_unit(Registry& registry);

}  // namespace plexus::layers
