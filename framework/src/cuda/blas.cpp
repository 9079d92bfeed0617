#include "plexus/cuda/blas.h"

#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::cuda {

namespace {
cublasOperation_t op(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

// f32: under bf16 products (Context::bf16_products) cublasGemmEx with
// CUBLAS_COMPUTE_32F_FAST_16BF, which rounds the f32 operands to bf16 for the
// tensor cores and accumulates and stores in f32; otherwise cublasSgemm, whose
// math mode (TF32 or strict, set by Context::set_precision) decides.
cublasStatus_t gemm_call(cublasHandle_t h, bool bf16, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                         int k, const float* alpha, const float* a, int lda, const float* b, int ldb,
                         const float* beta, float* c, int ldc) {
  if (bf16)
    return cublasGemmEx(h, ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, beta, c, CUDA_R_32F, ldc,
                        CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT);
  return cublasSgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
// f64 is never affected by the precision policy.
cublasStatus_t gemm_call(cublasHandle_t h, bool, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         const double* alpha, const double* a, int lda, const double* b, int ldb,
                         const double* beta, double* c, int ldc) {
  return cublasDgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t batched_call(cublasHandle_t h, bool bf16, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                            int k, const float* alpha, const float* a, int lda, long long sa, const float* b,
                            int ldb, long long sb, const float* beta, float* c, int ldc, long long sc, int batch) {
  if (bf16)
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, sa, b, CUDA_R_32F, ldb, sb,
                                      beta, c, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F_FAST_16BF,
                                      CUBLAS_GEMM_DEFAULT);
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
}
cublasStatus_t batched_call(cublasHandle_t h, bool, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                            int k, const double* alpha, const double* a, int lda, long long sa,
                            const double* b, int ldb, long long sb, const double* beta, double* c,
                            int ldc, long long sc, int batch) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
}
}  // namespace

template <typename T>
void gemm(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda,
          const T* b, int ldb, T beta, T* c, int ldc) {
  if (m == 0 || n == 0) return;
  // Column-major view: C^T[n, m] = op(B)^T[n, k] * op(A)^T[k, m]; a row-major
  // row stride is the column-major leading dimension of the transpose.
  check_cublas(gemm_call(cublas(ctx), ctx.bf16_products(), op(trans_b), op(trans_a), n, m, k, &alpha, b, ldb, a, lda,
                         &beta, c, ldc),
               "cublas gemm", __FILE__, __LINE__);
}

template <typename T>
void gemm(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a,
          const T* b, T beta, T* c) {
  gemm<T>(ctx, trans_a, trans_b, m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

template <typename T>
void gemm_strided_batched(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, T alpha,
                          const T* a, long long stride_a, const T* b, long long stride_b, T beta, T* c,
                          long long stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  int lda = trans_a ? m : k;  // row-major leading dimension of A as stored
  int ldb = trans_b ? k : n;
  check_cublas(batched_call(cublas(ctx), ctx.bf16_products(), op(trans_b), op(trans_a), n, m, k, &alpha, b, ldb,
                            stride_b, a, lda, stride_a, &beta, c, n, stride_c, batch),
               "cublas gemm strided batched", __FILE__, __LINE__);
}

template void gemm<float>(const Context&, bool, bool, int, int, int, float, const float*, int, const float*, int,
                          float, float*, int);
template void gemm<double>(const Context&, bool, bool, int, int, int, double, const double*, int, const double*, int,
                           double, double*, int);
template void gemm<float>(const Context&, bool, bool, int, int, int, float, const float*, const float*, float,
                          float*);
template void gemm<double>(const Context&, bool, bool, int, int, int, double, const double*, const double*,
                           double, double*);
template void gemm_strided_batched<float>(const Context&, bool, bool, int, int, int, float, const float*,
                                          long long, const float*, long long, float, float*, long long, int);
template void gemm_strided_batched<double>(const Context&, bool, bool, int, int, int, double, const double*,
                                           long long, const double*, long long, double, double*, long long,
                                           int);

}  // namespace plexus::cuda
