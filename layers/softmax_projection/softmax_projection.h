#pragma once
#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// SoftmaxProjection: a linear projection to vocabulary logits followed by the
// mean softmax cross-entropy against integer labels.
//   inputs   f [N, ...] seen as [N, F];  y [N], integers in [0, V) stored as floats
//   z = f W^T + b                                   z [N, V], W [V, F], b [V]
//   log p[n, v] = z[n, v] - m_n - log sum_u exp(z[n, u] - m_n),  m_n = max_u z[n, u]
//   L = (1/N) sum_n -log p[n, y_n]                  output: scalar {}
// Backward, with g = dL_out and s = softmax(z):
//   dz[n, v] = (g/N) (s[n, v] - [v == y_n])
//   df = dz W,  dW += dz^T f,  db += sum_n dz[n, :];  y has no gradient.
// Subtracting the row maximum keeps exp() from overflowing for large logits.
// On CUDA the logits (and dz, computed in place) are stored [N, V_pad] with
// V_pad = V rounded up to a multiple of 8, so that every row starts 32-byte
// aligned for the tensor-core GEMM tiles that write z and read dz. Only the
// logits are padded: columns v >= V are never part of m_n, of the sum or of a
// label (labels stay in [0, V)), and dz is zero there. W and b stay [V, F]
// and [V] (checkpoints as on the CPU). The products read the first V columns,
// except under bf16 products, where cuBLAS's bf16 kernels are faster over
// V_pad columns (docs/performance.md): there z = f W^T and df = dz W run over
// V_pad columns against a zero-padded [V_pad, F] copy of W made for the call.
// A label that is not an integer in [0, V) is an Error naming its batch index
// and value. Params: vocab_size (required, >= 1), bias (default true).
// Parameters: weight [V, F], bias [V]; both ~ U(-1/sqrt(F), 1/sqrt(F)).
class SoftmaxProjection : public Layer {
 public:
  explicit SoftmaxProjection(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  void create_parameters(const std::vector<Shape>& inputs) override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.input_gradients = {InputGradient::kComputed};
    traits.other_inputs_gradient = InputGradient::kNone;
    traits.has_cuda = PLEXUS_WITH_CUDA;
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
  // The Error thrown for label `value` at batch index `index`.
  [[noreturn]] void fail_label(std::int64_t index, double value) const;
  std::int64_t vocab_size_;
  bool bias_;
  std::int64_t in_features_ = 0;  // F the weight was created for; 0 before
};

void register_softmax_projection(Registry& registry);

}  // namespace plexus::layers
