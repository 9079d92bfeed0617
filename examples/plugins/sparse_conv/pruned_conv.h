#pragma once
// PrunedConv2d and PrunedConvTranspose2d: Plexus's Conv2d / ConvTranspose2d
// whose weight W carries a mask M (a buffer, saved in checkpoints as
// "<node>.mask") of 0s and 1s:
//   y = conv(x, W * M) + b
//   dW += M * dW_dense,   db += db_dense,   dx = dx_dense
// where the *_dense gradients are those of the built-in layer at weight
// W * M. Magnitude pruning follows the schedule of pruning_schedule.h:
// after update t, when the schedule prunes at t, M zeroes the smallest |W|
// to the sparsity s_t; after every update W <- W * M, so masked weights
// stay exactly zero through Adam (whose momentum would otherwise move them).
//
// The convolution itself is the built-in layer, created through the public
// registry (plexus::builtin_registry) and run on this layer's tensors, so
// its CPU and CUDA kernels (tensor cores, TF32 policy) are Plexus's own.
//
// Params: those of the built-in layer (out_channels, kernel, stride,
// padding, output_padding for the transposed one, bias), plus
//   sparsity    final sparsity s_f of the weight, in [0, 1) (required)
//   start_step  t0 (default 0)
//   end_step    t1 >= t0 (default t0: prune once)
//   prune_every updates between two pruning steps (default 100)
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "masked_ops.h"
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"
#include "pruning_schedule.h"

namespace sparse_conv {

class PrunedConv : public plexus::Layer {
 public:
  // `dense_type`: "Conv2d" or "ConvTranspose2d".
  PrunedConv(plexus::LayerConfig& config, const std::string& dense_type);
  std::vector<plexus::Shape> output_shapes(const std::vector<plexus::Shape>& inputs) const override;
  void create_parameters(const std::vector<plexus::Shape>& inputs) override;
  plexus::LayerTraits traits(plexus::Device device) const override {
    const plexus::LayerTraits dense = dense_->traits(device);
    plexus::LayerTraits traits;
    traits.has_cuda = PLEXUS_PLUGIN_WITH_CUDA && dense.has_cuda;
    // forward and backward only enqueue what the built-in layer enqueues plus
    // two element-wise kernels; pruning runs in after_update, outside the graph.
    traits.cuda_graph_capturable = dense.cuda_graph_capturable;
    return traits;
  }
  void after_update(plexus::Context& ctx, std::int64_t updates_taken) override;

  const PruningSchedule& schedule() const { return schedule_; }
  // Recomputes the mask to `sparsity` now and zeroes the masked weights
  // (what after_update does on a pruning step). Returns the zeros.
  std::int64_t prune_to(plexus::Context& ctx, double sparsity);

 protected:
  void forward_cpu(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                   const plexus::MutableTensors& outputs) override;
  void backward_cpu(plexus::Context& ctx, const plexus::ConstTensors& inputs, const plexus::ConstTensors& outputs,
                    const plexus::ConstTensors& output_grads, const plexus::MutableTensors& input_grads) override;
  void forward_cuda(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                    const plexus::MutableTensors& outputs) override;
  void backward_cuda(plexus::Context& ctx, const plexus::ConstTensors& inputs, const plexus::ConstTensors& outputs,
                     const plexus::ConstTensors& output_grads, const plexus::MutableTensors& input_grads) override;

 private:
  // Points the built-in layer's parameters at W * M (scratch) and at this
  // layer's bias, and recomputes W * M.
  void bind_dense(plexus::Context& ctx);
  void run_forward(plexus::Context& ctx, const plexus::ConstTensors& inputs, const plexus::MutableTensors& outputs);
  void run_backward(plexus::Context& ctx, const plexus::ConstTensors& inputs, const plexus::ConstTensors& outputs,
                    const plexus::ConstTensors& output_grads, const plexus::MutableTensors& input_grads);

  std::unique_ptr<plexus::Layer> dense_;
  PruningSchedule schedule_;
  bool has_bias_ = true;
  plexus::Tensor masked_weight_, masked_weight_grad_;  // W * M and the built-in layer's dW
};

void register_pruned_layers(plexus::Registry& registry);

}  // namespace sparse_conv
