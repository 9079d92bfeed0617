#pragma once
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// GaussianConditional: the conditional entropy model of the scale hyperprior
// (Ballé, Minnen, Singh, Hwang, Johnston 2018, eq. 9 and section 3): the
// likelihood of each element of y_hat under a Gaussian of its own scale,
// convolved with a unit-width uniform (the quantisation bin).
//   inputs: y_hat [N, C, H, W], scales (same shape), optionally means (same shape)
//   v = y_hat - mean (mean = 0 without the third input),  s = max(scale, scale_bound)
//   p = Phi((|v| + 1/2) / s) - Phi((|v| - 1/2) / s)
//     = Phi((1/2 - |v|) / s) - Phi((-1/2 - |v|) / s)        (by the symmetry of Phi)
//   output = max(p, likelihood_bound)
// With means this is CompressAI's GaussianConditional._likelihood(inputs,
// scales, means): the Gaussian is centred on the mean, so p depends on
// y_hat - mean alone; the mean-scale hyperprior pairs it with
// QuantizeAroundMean, which makes y_hat = round(y - mean) + mean in eval.
// The second form is the one computed, as in CompressAI: both arguments lie on
// the lower tail, where Phi(x) = erfc(-x / sqrt 2) / 2 is small and keeps its
// digits; far out (|v| / s large) the first form would be 1 - 1 = 0 in f32.
//
// Backward, with u = (1/2 - |v|) / s, l = (-1/2 - |v|) / s, phi the normal density:
//   dp/dv = sign(v) (phi(l) - phi(u)) / s,   dp/dmean = -dp/dv,
//   dp/ds = (l phi(l) - u phi(u)) / s.
// Both bounds take CompressAI's (and tensorflow-compression's) LowerBound
// gradient, "identity if towards", as FactorizedEntropyModel does: where a
// bound is active (scale < scale_bound, or p < likelihood_bound) the gradient
// passes only when it points towards raising the bounded value (a negative
// gradient of the loss with respect to it), and is zero otherwise. Why not
// the plain derivative of max() (zero wherever a bound is active): at
// initialisation many elements sit far out on the tail (p < 1e-9) or at the
// scale bound, and a zero gradient there would give the rate no say in
// pulling them back. Where no bound is active both rules give the exact
// derivative, which is what the gradient checks test.
//
// Params: scale_bound = 0.11 (> 0), likelihood_bound = 1e-9 (in [0, 1)).
class GaussianConditional : public Layer {
 public:
  explicit GaussianConditional(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
    return traits;
  }

  double scale_bound() const { return scale_bound_; }
  double likelihood_bound() const { return likelihood_bound_; }

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
  double scale_bound_;
  double likelihood_bound_;
};

void register_gaussian_conditional(Registry& registry);

}  // namespace plexus::layers
