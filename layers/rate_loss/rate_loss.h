#pragma once
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// RateLoss: the estimated rate in bits per pixel (Ballé et al. 2017, eq. 4's
// rate term), a scalar {}.
//   inputs: one or more likelihood tensors p^(1), ..., p^(K), each [N, ...]
//           (from FactorizedEntropyModel, GaussianConditional), then the
//           image [N, C, H, W] last (only its batch size and H x W are used)
//   R = sum_k sum_i -log2(p^(k)_i) / (N H W)
//   dR/dp^(k)_i = dy * -1 / (p^(k)_i ln 2 N H W)
// Several likelihood inputs give the total rate of several latents, as the
// scale hyperprior needs (y and the hyper-latent z). The image carries no
// gradient (InputGradient::kNone in its traits; a gradient tensor
// passed for it anyway is zeroed).
// Assumption: every p_i > 0. The entropy model lower-bounds its likelihoods
// at likelihood_bound (1e-9 by default), so this holds in a model; RateLoss
// does not clamp, so a zero or negative likelihood from elsewhere shows up as
// inf or NaN instead of being hidden.
class RateLoss : public Layer {
 public:
  explicit RateLoss(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.input_gradients.assign(static_cast<std::size_t>(likelihood_inputs_), InputGradient::kComputed);
    traits.other_inputs_gradient = InputGradient::kNone;
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
  // K: every input but the last (the image). Set by output_shapes, which
  // the Net and the gradient checks call before anything else; 1 until then.
  mutable int likelihood_inputs_ = 1;
};

// N * H * W of the image input [N, C, H, W]: the pixel count rates are divided by.
std::int64_t rate_loss_pixel_count(const Tensor& image);

void register_rate_loss(Registry& registry);

}  // namespace plexus::layers
