#pragma once
// cuBLAS, loaded on first use (CublasLibrary), and row-major GEMM through it
// on the context's stream (cuBLAS is column-major; a row-major C = A B is the
// column-major C^T = B^T A^T).
//   C[m, n] = alpha * op(A) * op(B) + beta * C
//   op(A) is [m, k]: A is [m, k], or [k, m] when trans_a.
//   op(B) is [k, n]: B is [k, n], or [n, k] when trans_b.
// f32 follows the context's precision (Context::set_precision): strict f32
// products, TF32 tensor cores under tf32, and under bf16 BF16 tensor cores
// (A and B rounded to bf16 copies, nearest even, in scratch memory; f32
// accumulation and f32 C: cublasGemmEx). f64 is always exact f64.
#include <cublas_v2.h>

#include <string>

#include "plexus/context.h"

namespace plexus::cuda {

// cuBLAS itself, opened with dlopen on first use rather than linked: loading
// it costs a process about 150 MB resident (cuBLASLt's static initialisers
// allocate most of it), which a program that never makes a CUDA context
// (compressing on the CPU, --help) would pay for nothing. Every cuBLAS call
// of Plexus goes through these pointers, each resolved once; a plugin may
// call them too, on the handle cuda::cublas(ctx) gives (cuda_context.h).
struct CublasLibrary {
  // The two whose header adds a C++ overload (a cudaDataType compute type) are spelled out.
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                  const void*, const void*, cudaDataType, int, long long, const void*,
                                                  cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                                  long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSetWorkspace) set_workspace = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
  decltype(&cublasDgemm) dgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  decltype(&cublasDgemmStridedBatched) dgemm_strided_batched = nullptr;
  GemmEx gemm_ex = nullptr;
  GemmStridedBatchedEx gemm_strided_batched_ex = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// The process's cuBLAS: libcublas.so.<major> of the toolkit Plexus was built
// with (cublas_library_name()), loaded and resolved by the first call, from
// any thread. When it cannot be loaded, this call and every later one throw
// DeviceError naming the library and the loader's reason.
const CublasLibrary& cublas_library();
std::string cublas_library_name();
// Loads the cuBLAS named `soname` (a file name the dynamic loader looks up,
// or a path) and resolves every entry point above; throws DeviceError naming
// it and the loader's reason when it cannot be loaded or lacks one.
CublasLibrary load_cublas_library(const std::string& soname);

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
