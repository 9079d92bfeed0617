#pragma once
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// MSELoss: the mean squared error of two tensors of equal shape, a scalar {}.
//   L = (1/n) sum_i (a_i - b_i)^2,   n = numel(a)
//   dL/da_i = dy * 2 (a_i - b_i) / n,   dL/db_i = -dL/da_i
// With a third input, weights [N] (N = a.shape[0], one weight per sample),
// each sample's errors are weighted, i.e. the mean over samples of w_n mse_n:
//   L = (1/n) sum_i w_batch(i) (a_i - b_i)^2
//   dL/da_i = dy * 2 w_batch(i) (a_i - b_i) / n,   dL/db_i = -dL/da_i
//   dL/dw_m = dy * (1/n) sum over the elements i of sample m of (a_i - b_i)^2
// (batch(i) is the sample element i belongs to). Every input is
// differentiable; no parameters.
class MSELoss : public Layer {
 public:
  explicit MSELoss(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    // The weighted CUDA path's scratch tensor is allocated only when the shape changes.
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
  void forward_weighted_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs);
  void backward_weighted_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                              const ConstTensors& output_grads, const MutableTensors& input_grads);
#endif
  Tensor sample_partials_;  // CUDA, weighted: [N, blocks per sample] partial sums of (a - b)^2
};

void register_mse_loss(Registry& registry);

}  // namespace plexus::layers
