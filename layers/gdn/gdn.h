#pragma once
#include <cstdint>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// The CPU forward pass runs on blocks of this many pixels of one image's
// plane (gdn.cpp says why). A pixel's bits depend on its place in its block:
// a caller that runs a part of an image (the codec's bands of rows) says
// where the part starts (GDN::set_cpu_block_origin) to get the whole image's.
inline constexpr std::int64_t kGdnForwardBlockPixels = 1024;

// Generalized divisive normalization (Ballé, Laparra, Simoncelli 2016), per
// pixel of an input [N, C, ...] (channel axis 1, any rank >= 2):
//   n_i = beta_i + sum_j gamma_ij x_j^2
//   GDN:  y_i = x_i / sqrt(n_i)        IGDN: y_i = x_i * sqrt(n_i)
//
// Parameters beta [C] and gamma [C, C] are stored reparametrised, as in
// tensorflow-compression and CompressAI, so that they stay positive and
// small values learn slowly:
//   pedestal = reparam_offset^2
//   stored   = sqrt(max(value + pedestal, pedestal))
//   value    = max(stored, bound)^2 - pedestal,
//   bound_beta = sqrt(beta_min + pedestal),  bound_gamma = reparam_offset.
// Initial values: beta = 1, gamma = gamma_init * I.
//
// The lower bound max(stored, bound) has tfc's "identity if towards"
// gradient: dL/dstored = dL/dmax where stored >= bound, or where the
// gradient would push the stored value up (dL/dmax < 0, so that a descent
// step moves it towards the bound); zero otherwise. A parameter stuck below
// its bound can thus climb back, but is never pushed further down.
//
// Backward, with q_i = dL/dn_i and sums over pixels and batch. Since
// dn_i/dx_k = 2 gamma_ik x_k and dn_i/dgamma_ik = x_k^2:
//   dx_k = dy_k (dy_k/dx_k at fixed n) + sum_i q_i 2 gamma_ik x_k.
// IGDN: y_i = x_i s_i with s_i = n_i^1/2, so dL/dn_i = dy_i x_i / (2 s_i).
//   GDN (r = n^-1/2):  q_i = -1/2 dy_i x_i r_i^3
//                      dx_k = dy_k r_k + 2 x_k (gamma^T q)_k
//   IGDN (s = n^1/2):  q_i = +1/2 dy_i x_i / s_i
//                      dx_k = dy_k s_k + 2 x_k (gamma^T q)_k
//   dbeta_i = sum q_i,  dgamma_ik = sum q_i x_k^2
// (for GDN, with t_i = dy_i x_i r_i^3: dx_k = dy_k r_k - x_k (gamma^T t)_k,
// dbeta_i = -1/2 sum t_i, dgamma_ik = -1/2 sum t_i x_k^2), then chained
// through the reparametrisation: dL/dstored = 2 max(stored, bound) dL/dvalue
// where the lower bound lets the gradient through.
class GDN : public Layer {
 public:
  GDN(LayerConfig& config, bool inverse);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  void create_parameters(const std::vector<Shape>& inputs) override;
  LayerTraits traits(Device device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
    // The CPU kernel computes a block's norms from x before it writes y.
    traits.forward_in_place = device.is_cpu();
    // On CUDA x, y and their gradients may each be f32 or bf16 (gdn.cu says
    // which calls read and write bf16 themselves); the CPU kernels take f32 and f64.
    traits.stores_bf16 = device.is_cuda();
    return traits;
  }

  bool inverse() const { return inverse_; }
  // The CPU forward's blocks end where origin + pixel is a multiple of
  // kGdnForwardBlockPixels: `origin` is the index, in a whole plane, of this
  // input's first pixel when the input is a part of that plane (0, the
  // default: blocks from the first pixel). Any origin gives each pixel the
  // bits it gets in the whole plane, where its block lies whole in the part.
  void set_cpu_block_origin(std::int64_t origin) { cpu_block_origin_ = origin; }

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
  double pedestal() const { return reparam_offset_ * reparam_offset_; }
  double beta_bound() const;
  double gamma_bound() const { return reparam_offset_; }
  // Throws ShapeError when x's channels differ from those the parameters were made for.
  void check_channels(const Tensor& x);

  bool inverse_;
  double beta_min_;
  double gamma_init_;
  double reparam_offset_;
  std::int64_t cpu_block_origin_ = 0;
  // CUDA scratch, kept between calls (see convolution/scratch.h): the tensor-core
  // backward's per-block dgamma/dbeta partial sums [blocks, C*C + C].
  Tensor partials_;
  // f32 stand-ins of bf16 tensors for the calls without a bf16 kernel (activation_storage.h).
  struct StandIns {
    Tensor input, output, output_grad, input_grad;
  } stand_ins_;
#if PLEXUS_WITH_CUDA
  // The CUDA passes on f32 or f64 tensors.
  void forward_cuda_float(Context& ctx, const Tensor& x, Tensor& y);
  void backward_cuda_float(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx);
#endif
};

// Registers "GDN" and "IGDN".
void register_gdn(Registry& registry);

}  // namespace plexus::layers
