#pragma once
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// Normalisation over a set S of elements of an input x [N, C, ...] (channel
// axis 1, any rank >= 2; P = the product of the dimensions after C), with a
// per-channel affine map:
//   mu = mean_S x,  var = mean_S (x - mu)^2   (biased),  r = 1 / sqrt(var + eps)
//   xhat = (x - mu) r,   y = gamma_c xhat + beta_c
//   LayerNorm: S = the C channels of one pixel (n, p): Swin's and TCM's
//              LayerNorm on a channels-last tensor, computed on NCHW;
//   GroupNorm: S = the C/G channels of group g of sample n, over all P
//              pixels (torch.nn.GroupNorm), channel c in group c / (C/G).
// Backward, with g = dy gamma_c and means over S:
//   dx = r (g - mean_S g - xhat mean_S(g xhat))
//   dgamma_c += sum dy xhat,  dbeta_c += sum dy   (over the batch and pixels)
// Without the affine map (elementwise_affine / affine false) gamma = 1 and
// beta = 0 are constants, not parameters.
// Parameters gamma [C] (initially 1) and beta [C] (initially 0); C comes from
// the input, and a later input of another C is refused.
class Normalization : public Layer {
 public:
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  void create_parameters(const std::vector<Shape>& inputs) override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    // The CUDA backward's scratch tensors are allocated only when the shape changes.
    traits.cuda_graph_capturable = true;
    return traits;
  }

  double eps() const { return eps_; }
  bool affine() const { return affine_; }

 protected:
  // Reads eps (a finite number > 0) and the affine switch named `affine_key`
  // (a subclass calls it after reading its own params, so that they list first).
  void read_settings(LayerConfig& config, const char* affine_key);
  // The parameter `name` (gamma or beta), or null without the affine map.
  Parameter* affine_parameter(const char* name) { return affine_ ? &parameter(name) : nullptr; }

 private:
  double eps_ = 1e-5;
  bool affine_ = true;
  std::int64_t channels_ = 0;  // C the parameters were made for; 0 before create_parameters
};

// LayerNorm over the channels of each pixel (see Normalization).
//   params: eps (default 1e-5), elementwise_affine (default true)
class LayerNorm : public Normalization {
 public:
  explicit LayerNorm(LayerConfig& config);

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
  // CUDA backward scratch: mean and r per pixel [2, N * P], and the
  // per-chunk partial sums of dgamma and dbeta (normalization.cu).
  Tensor statistics_;
  Tensor partials_;
};

// GroupNorm over groups of channels of each sample (see Normalization).
//   params: groups G (required, must divide C), eps (default 1e-5), affine (default true)
class GroupNorm : public Normalization {
 public:
  explicit GroupNorm(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;

  std::int64_t groups() const { return groups_; }

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
  std::int64_t groups_;
  // CUDA backward scratch: mean and r per (sample, group) [2, N * G], and the
  // per-chunk partial sums of dgamma and dbeta (normalization.cu).
  Tensor statistics_;
  Tensor partials_;
};

// A parameter's values or gradient as T, or null for no parameter (no affine map).
template <typename T>
const T* values_or_null(const Parameter* parameter) {
  return parameter ? parameter->value.data<T>() : nullptr;
}
template <typename T>
T* gradient_or_null(Parameter* parameter) {
  return parameter ? parameter->grad.data<T>() : nullptr;
}

// Registers "LayerNorm" and "GroupNorm".
void register_normalization(Registry& registry);

}  // namespace plexus::layers
