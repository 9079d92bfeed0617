#pragma once
// SparseConv2d and SparseConvTranspose2d: inference (and input gradients)
// of a pruned convolution that visits only the non-zero weights.
//   y = conv(x, W) + b        (Conv2d / ConvTranspose2d semantics and params)
//   dx = conv^T(dy, W)        (the input gradient; W and b are frozen)
// W and b are buffers named "weight" and "bias" like the built-in layers'
// parameters, so a pruned checkpoint (or a dense one) loads into them by
// name. At the first forward, W is converted to COO and to the row layout
// of sparse_filter.h ("format": "rows", the default, or "coo" to run the
// COO kernels); the buffers are frozen from then on. No parameter gradients:
// a net that holds it can be fine-tuned around it.
//
// Params: out_channels, kernel, stride (1), padding (0), output_padding (0;
// the transposed one only), bias (true), format ("rows" | "coo").
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"
#include "sparse_filter.h"
#include "sparse_kernels.h"

namespace sparse_conv {

class SparseConv : public plexus::Layer {
 public:
  // `dense_type`: "Conv2d" or "ConvTranspose2d", whose semantics it has.
  SparseConv(plexus::LayerConfig& config, const std::string& dense_type);
  std::vector<plexus::Shape> output_shapes(const std::vector<plexus::Shape>& inputs) const override;
  void create_parameters(const std::vector<plexus::Shape>& inputs) override;
  plexus::LayerTraits traits(plexus::Device) const override {
    plexus::LayerTraits traits;
    traits.has_cuda = PLEXUS_PLUGIN_WITH_CUDA;
    return traits;
  }

 protected:
  void forward_cpu(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                   const plexus::MutableTensors& outputs) override;
  void backward_cpu(plexus::Context& ctx, const plexus::ConstTensors& inputs, const plexus::ConstTensors& outputs,
                    const plexus::ConstTensors& output_grads, const plexus::MutableTensors& input_grads) override;
#if PLEXUS_PLUGIN_WITH_CUDA
  void forward_cuda(plexus::Context& ctx, const plexus::ConstTensors& inputs,
                    const plexus::MutableTensors& outputs) override;
  void backward_cuda(plexus::Context& ctx, const plexus::ConstTensors& inputs, const plexus::ConstTensors& outputs,
                     const plexus::ConstTensors& output_grads, const plexus::MutableTensors& input_grads) override;
#endif

 private:
  // The filter, converted from the weight buffer at the first call.
  const SparseFilter& filter();
  // Input and output shapes -> the pairing geometry of sparse_filter.h.
  ConvGeometry geometry(const plexus::Shape& input, const plexus::Shape& output) const;

  bool transposed_;
  SparseFormat format_ = SparseFormat::rows;
  bool has_bias_ = true;
  std::int64_t kernel_ = 0, stride_ = 1, padding_ = 0;
  std::unique_ptr<plexus::Layer> dense_;  // the built-in layer: shapes and parameter shapes
  std::optional<SparseFilter> filter_;
#if PLEXUS_PLUGIN_WITH_CUDA
  std::shared_ptr<cuda::DeviceFilter> device_filter_;
#endif
};

void register_sparse_layers(plexus::Registry& registry);

}  // namespace sparse_conv
