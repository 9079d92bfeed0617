#pragma once
// SimplifiedGDN and SimplifiedIGDN: the simplified generalized divisive
// normalization of Johnston et al. 2019 ("Computationally efficient neural
// image compression"), an out-of-tree Plexus plugin.
//
// Per pixel, over the channels i, j of one input [N, C, ...] (channel axis 1):
//   n_i = beta_i + sum_j gamma_ij |x_j|
//   SimplifiedGDN:   y_i = x_i / n_i
//   SimplifiedIGDN:  y_i = x_i * n_i
// It replaces GDN's square and square root by an absolute value: cheaper,
// and Johnston et al. report equal rate-distortion performance.
//
// Gradients (dy: output gradient; sums over every pixel of the batch):
//   c_i  = -1 / n_i^2 (GDN)  or  1 (IGDN)          d y_i / d n_i = x_i c_i
//   t_i  = dy_i x_i c_i
//   dx_k = dy_k / n_k (GDN) or dy_k n_k (IGDN)  +  sign(x_k) sum_i gamma_ik t_i
//   dbeta_i = sum t_i,    dgamma_ik = sum t_i |x_k|
// |x| has a kink at 0; there sign(0) = 0 is used (a subgradient).
//
// Parameters: beta [C], gamma [C, C], kept non-negative by GDN's
// reparametrisation (Ballé 2018; tensorflow-compression's GDNParameter):
//   stored s, value v = max(s, bound)^2 - pedestal,  pedestal = reparam_offset^2
//   beta:  bound = sqrt(beta_min + pedestal)  ->  beta >= beta_min > 0, so n_i > 0
//   gamma: bound = reparam_offset             ->  gamma >= 0
//   initial values beta = 1, gamma = gamma_init * I, stored as sqrt(v + pedestal).
// With v ~ s^2 a step on s changes v in proportion to sqrt(v): entries near
// 0 slow down instead of crossing below it, and the pedestal keeps dv/ds =
// 2s away from 0 at v = 0 so they can grow again. Gradient through the
// bound: ds = 2 max(s, bound) dv where s >= bound, and below the bound only
// when dv < 0 (a descent step then raises s back towards the bound); an entry
// stuck below its bound would otherwise never move again. This is the
// "identity if towards" rule of tensorflow-compression and CompressAI.
//
// Params (as GDN): beta_min = 1e-6, gamma_init = 0.1, reparam_offset = 2^-18.
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

// Defined to 1 or 0 by plexus_add_plugin(): whether simplified_gdn.cu is
// compiled into this plugin. (PLEXUS_WITH_CUDA only says how libplexus was built.)
#ifndef PLEXUS_PLUGIN_WITH_CUDA
#define PLEXUS_PLUGIN_WITH_CUDA 0
#endif

namespace simplified_gdn {

using plexus::ConstTensors;
using plexus::Context;
using plexus::MutableTensors;
using plexus::Shape;

// The bounds and pedestal of the reparametrisation, from the layer's params.
struct Reparametrization {
  double pedestal;     // reparam_offset^2
  double beta_bound;   // sqrt(beta_min + pedestal)
  double gamma_bound;  // reparam_offset
};

class SimplifiedGDN : public plexus::Layer {
 public:
  // inverse = false: SimplifiedGDN (divide); true: SimplifiedIGDN (multiply).
  SimplifiedGDN(plexus::LayerConfig& config, bool inverse);

  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  void create_parameters(const std::vector<Shape>& inputs) override;
  plexus::LayerTraits traits(plexus::Device) const override {
    plexus::LayerTraits traits;
    traits.has_cuda = PLEXUS_PLUGIN_WITH_CUDA;
    return traits;
  }

 protected:
  void forward_cpu(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) override;
  void backward_cpu(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                    const ConstTensors& output_grads, const MutableTensors& input_grads) override;
#if PLEXUS_PLUGIN_WITH_CUDA
  void forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) override;
  void backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors& outputs,
                     const ConstTensors& output_grads, const MutableTensors& input_grads) override;
#endif

 private:
  bool inverse_;
  double beta_min_;
  double gamma_init_;
  Reparametrization reparam_;
  std::int64_t channels_ = 0;  // set by create_parameters
};

// Registers "SimplifiedGDN" and "SimplifiedIGDN".
void register_layers(plexus::Registry& registry);

}  // namespace simplified_gdn
