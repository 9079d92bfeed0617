#pragma once
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// FullyConnected (a linear map): the input [N, ...] is seen as X [N, F] with
// F the product of the non-batch dimensions, and
//   Y = X W^T + b                     Y [N, out], W [out, F], b [out]
//   dL/dX = dL/dY W
//   dL/dW += (dL/dY)^T X,   dL/db += sum_n dL/dY[n, :]
// Params: out_features (required, >= 1), bias (default true).
// Parameters: weight [out, F], bias [out]; both ~ U(-1/sqrt(F), 1/sqrt(F)).
class FullyConnected : public Layer {
 public:
  explicit FullyConnected(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  void create_parameters(const std::vector<Shape>& inputs) override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
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
  std::int64_t out_features_;
  bool bias_;
  // F the weight was created for (0 before create_parameters); a later
  // reshape to another F is refused in output_shapes.
  std::int64_t in_features_ = 0;
};

void register_fully_connected(Registry& registry);

}  // namespace plexus::layers
