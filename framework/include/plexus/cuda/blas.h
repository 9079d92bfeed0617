#pragma once
// Row-major GEMM through cuBLAS on the context's stream (cuBLAS is
// column-major; a row-major C = A B is the column-major C^T = B^T A^T).
//   C[m, n] = alpha * op(A) * op(B) + beta * C
//   op(A) is [m, k]: A is [m, k], or [k, m] when trans_a.
//   op(B) is [k, n]: B is [k, n], or [n, k] when trans_b.
// f32 follows the context's precision (Context::set_precision): strict f32
// products, TF32 tensor cores under tf32, and under bf16 BF16 tensor cores
// (A and B rounded to bf16 copies, nearest even, in scratch memory; f32
// accumulation and f32 C: cublasGemmEx). f64 is always exact f64.
#include "plexus/context.h"

namespace plexus::cuda {

template <typename T>
void gemm(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, const T* b, T beta,
          T* c);

// The same with explicit row strides (in elements) of A, B and C as stored
// row-major, for matrices that are column windows of wider buffers (a
// padded C, say: ldc >= n). The strides above are the dense ones: A's row
// length (k, or m when trans_a), B's (n, or k when trans_b) and n.
template <typename T>
void gemm(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b,
          int ldb, T beta, T* c, int ldc);

// `batch` independent GEMMs; matrix i starts at a + i*stride_a (etc.).
template <typename T>
void gemm_strided_batched(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a,
                          long long stride_a, const T* b, long long stride_b, T beta, T* c, long long stride_c,
                          int batch);

}  // namespace plexus::cuda
