#pragma once
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// QuantizeAroundMean: the quantiser of a mean-scale hyperprior (Minnen,
// Ballé, Toderici 2018): y is coded as the integer round(y - mu) and
// reconstructed as y_hat = round(y - mu) + mu, as CompressAI's
// GaussianConditional does with means.
//   inputs:  y [N, C, H, W] (any shape), mu (the predicted means, same shape)
//   training: y_hat = y + u,  u ~ U(-1/2, 1/2) per element (the rate proxy;
//             y - mu + u + mu, so the mean does not enter)
//   eval:     y_hat = round(y - mu) + mu  (halves away from zero, like std::round)
// Param "synthesis" picks what the synthesis transform is given:
//   "noise" (default, CompressAI's mbt2018-mean): one output, y_hat above,
//     for both the rate and the synthesis;
//   "straight_through" (Minnen & Singh 2020; ELIC): a second output
//     y_st = round(y - mu) + mu in both modes, for the synthesis, while the
//     first output stays the noisy y_hat for the rate.
// Backward, straight through in every mode and output:
//   dL/dy = dL/dy_hat (+ dL/dy_st),   dL/dmu = 0.
// Why: in training d(y + u)/dy = 1 and d(y + u)/dmu = 0 exactly. Rounding
// has derivative 0 almost everywhere, so round(y - mu) + mu is differentiated
// as if round were the identity (CompressAI's quantize_ste): (y - mu) + mu
// has derivative 1 in y and 0 in mu. The means learn from the rate alone,
// through GaussianConditional's means input.
// Noise as UniformNoise's: CPU from ctx.random() (53 bits per double), CUDA
// from cuda::device_random (Philox); both restart with Context::reseed(),
// but the two devices draw different sequences.
class QuantizeAroundMean : public Layer {
 public:
  explicit QuantizeAroundMean(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
    return traits;
  }

  bool straight_through() const { return straight_through_; }

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
  bool straight_through_;
};

void register_quantize_around_mean(Registry& registry);

}  // namespace plexus::layers
