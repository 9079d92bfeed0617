#pragma once
#include <cstdint>
#include <vector>

#include "plexus/layer.h"
#include "plexus/layer_config.h"
#include "plexus/registry.h"

namespace plexus::layers {

// MatMul: batched matrix product of two inputs, C = scale * op(A) op(B).
// The last two dimensions of each input are its matrix (row-major); the
// leading dimensions are the batch and must be equal in A and B (no
// broadcasting), and A and B have the same rank (>= 2):
//   A [..., M, K] (or [..., K, M] with transpose_a: op(A) = A^T)
//   B [..., K, P] (or [..., P, K] with transpose_b: op(B) = B^T)
//   C [..., M, P],   C[b] = scale * op(A[b]) op(B[b])  for each batch index b
// Backward (dC the output gradient):
//   d op(A) = scale * dC op(B)^T,   d op(B) = scale * op(A)^T dC,
// so dA = scale * dC op(B)^T (or its transpose, scale * op(B) dC^T, with
// transpose_a), and dB = scale * op(A)^T dC (or scale * dC^T op(A) with transpose_b).
// Params: "transpose_a", "transpose_b" (booleans, default false); "scale"
// (number, default 1, finite and not 0; attention's 1/sqrt(d)). No parameters.
// On CUDA, f32 products follow the context's precision (Context::set_precision)
// as every cuBLAS product of the framework does; f64 is exact.
class MatMul : public Layer {
 public:
  explicit MatMul(LayerConfig& config);
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const override;
  LayerTraits traits(Device) const override {
    LayerTraits traits;
    traits.has_cuda = PLEXUS_WITH_CUDA;
    traits.cuda_graph_capturable = true;
    return traits;
  }

  // The sizes of one call: `batch` products of op(A) [rows, inner] by op(B) [inner, columns].
  struct Sizes {
    std::int64_t batch = 1;
    std::int64_t rows = 0;     // M
    std::int64_t inner = 0;    // K
    std::int64_t columns = 0;  // P
  };

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
  Sizes sizes_of(const Shape& a, const Shape& b) const;
  bool transpose_a_;
  bool transpose_b_;
  double scale_;
};

// The products of MatMul's forward and backward, written once for both
// devices. `gemm` is a row-major strided-batched GEMM that overwrites its
// output, in the argument order of cuda::gemm_strided_batched (plexus/cuda/blas.h) less beta:
//   gemm(trans_x, trans_y, m, n, k, alpha, x, stride_x, y, stride_y, z, stride_z, batch)
//   sets z[i] = alpha * op(x[i]) op(y[i]) ([m, n]) for i < batch, x[i] = x + i * stride_x (etc.).
template <typename T, typename Gemm>
void matmul_forward(const MatMul::Sizes& s, bool transpose_a, bool transpose_b, T scale, const T* a, const T* b, T* c,
                    Gemm&& gemm) {
  const std::int64_t m = s.rows, k = s.inner, p = s.columns;
  gemm(transpose_a, transpose_b, m, p, k, scale, a, m * k, b, k * p, c, m * p, s.batch);
}

// dA and dB (each skipped when null) from dC, as in the formulas above.
template <typename T, typename Gemm>
void matmul_backward(const MatMul::Sizes& s, bool transpose_a, bool transpose_b, T scale, const T* a, const T* b,
                     const T* dc, T* da, T* db, Gemm&& gemm) {
  const std::int64_t m = s.rows, k = s.inner, p = s.columns;
  if (da) {
    if (!transpose_a)  // dA [M, K] = scale * dC [M, P] op(B)^T [P, K]
      gemm(false, !transpose_b, m, k, p, scale, dc, m * p, b, k * p, da, m * k, s.batch);
    else  // dA [K, M] = scale * op(B) [K, P] dC^T [P, M]
      gemm(transpose_b, true, k, m, p, scale, b, k * p, dc, m * p, da, m * k, s.batch);
  }
  if (db) {
    if (!transpose_b)  // dB [K, P] = scale * op(A)^T [K, M] dC [M, P]
      gemm(!transpose_a, false, k, p, m, scale, a, m * k, dc, m * p, db, k * p, s.batch);
    else  // dB [P, K] = scale * dC^T [P, M] op(A) [M, K]
      gemm(true, transpose_a, p, k, m, scale, dc, m * p, a, m * k, db, k * p, s.batch);
  }
}

void register_matmul(Registry& registry);

}  // namespace plexus::layers
