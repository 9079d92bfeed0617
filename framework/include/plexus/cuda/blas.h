#pragma once
// Row-major GEMM through cuBLAS on the context's stream (cuBLAS is
// column-major; a row-major C = A B is the column-major C^T = B^T A^T).
//   C[m, n] = alpha * op(A) * op(B) + beta * C
//   op(A) is [m, k]: A is [m, k], or [k, m] when trans_a.
//   op(B) is [k, n]: B is [k, n], or [n, k] when trans_b.
// f32 uses TF32 tensor cores when the context allows it (Context::set_allow_tf32).
#include "plexus/context.h"

namespace plexus::cuda {

template <typename T>
void gemm(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a,
          const T* b, T beta, T* c);

// `batch` independent GEMMs; matrix i starts at a + i*stride_a (etc.).
template <typename T>
void gemm_strided_batched(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k,
                          T alpha, const T* a, long long stride_a, const T* b, long long stride_b,
                          T beta, T* c, long long stride_c, int batch);

}  // namespace plexus::cuda
