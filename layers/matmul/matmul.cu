// CUDA side of MatMul (math in matmul.h): every product is one cuBLAS
// strided-batched GEMM (cuda::gemm_strided_batched: cublasSgemmStridedBatched
// or, in f64, cublasDgemmStridedBatched, each call checked), on the context's
// stream, with the transposes of matmul_forward / matmul_backward.
#include <string>

#include "fully_connected/dense.h"
#include "matmul/matmul.h"
#include "plexus/cuda/blas.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

// matmul.h's `gemm` on the context's stream. cuBLAS takes int sizes and batch
// counts (a ShapeError names the one that does not fit); with k = 0 the product
// is a zero matrix, written here rather than left to cuBLAS's k = 0 convention.
template <typename T>
struct CudaGemm {
  const Context& ctx;
  const std::string& who;
  void operator()(bool transpose_x, bool transpose_y, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                  const T* x, std::int64_t stride_x, const T* y, std::int64_t stride_y, T* z, std::int64_t stride_z,
                  std::int64_t batch) const {
    if (m == 0 || n == 0 || batch == 0) return;
    if (k == 0) {
      cuda::check_cuda(cudaMemsetAsync(z, 0, static_cast<std::size_t>(batch * stride_z) * sizeof(T), cuda::stream(ctx)),
                       "cudaMemsetAsync", __FILE__, __LINE__);
      return;
    }
    cuda::gemm_strided_batched<T>(ctx, transpose_x, transpose_y, dense::cublas_size(m, "matrix rows", who),
                                  dense::cublas_size(n, "matrix columns", who),
                                  dense::cublas_size(k, "inner dimension", who), alpha, x, stride_x, y, stride_y, T(0),
                                  z, stride_z, dense::cublas_size(batch, "batch (leading dimensions)", who));
  }
};

}  // namespace

void MatMul::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  const Sizes sizes = sizes_of(inputs[0]->shape(), inputs[1]->shape());
  const std::string node = who();
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    matmul_forward<T>(sizes, transpose_a_, transpose_b_, T(scale_), inputs[0]->data<T>(), inputs[1]->data<T>(),
                      outputs[0]->data<T>(), CudaGemm<T>{ctx, node});
  });
}

void MatMul::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&,
                           const ConstTensors& output_grads, const MutableTensors& input_grads) {
  const Sizes sizes = sizes_of(inputs[0]->shape(), inputs[1]->shape());
  const std::string node = who();
  dispatch_float(inputs[0]->dtype(), [&](auto zero) {
    using T = decltype(zero);
    matmul_backward<T>(sizes, transpose_a_, transpose_b_, T(scale_), inputs[0]->data<T>(), inputs[1]->data<T>(),
                       output_grads[0]->data<T>(), input_grads[0] ? input_grads[0]->data<T>() : nullptr,
                       input_grads[1] ? input_grads[1]->data<T>() : nullptr, CudaGemm<T>{ctx, node});
  });
}

}  // namespace plexus::layers
