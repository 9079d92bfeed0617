#include "plexus/cuda/blas.h"

#include <dlfcn.h>

#include <type_traits>
#include <variant>

#include "../backend.h"
#include "bf16_round.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

// The name each call is exported under is the one cublas_v2.h maps it to
// (cublasSgemm -> cublasSgemm_v2: the unmapped name is the legacy API's, with
// another signature), so it is read from the header's own macro.
#define PLEXUS_CUBLAS_EXPORTED_NAME(call) PLEXUS_CUBLAS_STRING(call)
#define PLEXUS_CUBLAS_STRING(name) #name

namespace plexus::cuda {

namespace {
// A DeviceError for cuBLAS as `soname` that cannot be used, for `reason`.
DeviceError unusable(const std::string& soname, const std::string& reason) {
  return DeviceError("cuBLAS (" + soname + ") cannot be loaded, and CUDA work needs it: " + reason +
                     " (install the CUDA toolkit's cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) +
                     ", or put the folder that holds it on LD_LIBRARY_PATH)");
}

template <typename Function>
void resolve(void* library, const std::string& soname, const char* symbol, Function& function) {
  dlerror();
  function = reinterpret_cast<Function>(dlsym(library, symbol));
  const char* reason = dlerror();
  if (!function)
    throw unusable(soname, std::string("it has no ") + symbol + (reason ? std::string(": ") + reason : ""));
}

// What loading the process's cuBLAS gave: the library, or why it failed.
using LoadedCublas = std::variant<CublasLibrary, std::string>;

LoadedCublas load_process_cublas() {
  try {
    return load_cublas_library(cublas_library_name());
  } catch (const DeviceError& error) {
    return std::string(error.what());
  }
}
}  // namespace

std::string cublas_library_name() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

CublasLibrary load_cublas_library(const std::string& soname) {
  void* library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* reason = dlerror();
    throw unusable(soname, "dlopen failed: " + std::string(reason ? reason : "no reason given"));
  }
  CublasLibrary blas;
  try {
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasCreate), blas.create);
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasDestroy), blas.destroy);
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasSetStream), blas.set_stream);
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasSetWorkspace), blas.set_workspace);
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasSetMathMode), blas.set_math_mode);
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasSgemm), blas.sgemm);
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasDgemm), blas.dgemm);
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasSgemmStridedBatched), blas.sgemm_strided_batched);
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasDgemmStridedBatched), blas.dgemm_strided_batched);
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasGemmEx), blas.gemm_ex);
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasGemmStridedBatchedEx), blas.gemm_strided_batched_ex);
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasGetStatusName), blas.status_name);
    resolve(library, soname, PLEXUS_CUBLAS_EXPORTED_NAME(cublasGetStatusString), blas.status_string);
  } catch (const DeviceError&) {
    dlclose(library);
    throw;
  }
  // The library stays loaded for the process's life: handles made from it may outlive any caller.
  return blas;
}

// The C entry points behind the two spelled-out types (the header overloads
// both in C++): selecting them fails to compile should their signatures change.
static_assert(std::is_same_v<decltype(static_cast<CublasLibrary::GemmEx>(&cublasGemmEx)), CublasLibrary::GemmEx>);
static_assert(std::is_same_v<decltype(static_cast<CublasLibrary::GemmStridedBatchedEx>(&cublasGemmStridedBatchedEx)),
                             CublasLibrary::GemmStridedBatchedEx>);

const CublasLibrary& cublas_library() {
  // Loaded by the first call (a local static is initialised once, thread-safely); a failure is kept, so every
  // call reports it rather than retrying the loader.
  static const LoadedCublas loaded = load_process_cublas();
  if (const std::string* failure = std::get_if<std::string>(&loaded)) throw DeviceError(*failure);
  return std::get<CublasLibrary>(loaded);
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const CublasLibrary& blas = cublas_library();  // loaded: the status came from it
  throw DeviceError(std::string(call) + " failed: " + blas.status_name(status) + " (" + blas.status_string(status) +
                    ") at " + where(file, line));
}

namespace {
cublasOperation_t op(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

cublasStatus_t gemm_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         const float* alpha, const float* a, int lda, const float* b, int ldb, const float* beta,
                         float* c, int ldc) {
  return cublas_library().sgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t gemm_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         const double* alpha, const double* a, int lda, const double* b, int ldb, const double* beta,
                         double* c, int ldc) {
  return cublas_library().dgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t batched_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const float* alpha, const float* a, int lda, long long sa, const float* b, int ldb,
                            long long sb, const float* beta, float* c, int ldc, long long sc, int batch) {
  return cublas_library().sgemm_strided_batched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                                                batch);
}
cublasStatus_t batched_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const double* alpha, const double* a, int lda, long long sa, const double* b, int ldb,
                            long long sb, const double* beta, double* c, int ldc, long long sc, int batch) {
  return cublas_library().dgemm_strided_batched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                                                batch);
}

// A bf16 copy (round to nearest even) of the `count` f32 values an operand
// spans as stored, strides and gaps included, so the copy keeps the
// original's leading dimension and batch stride. Device scratch from the
// stream-ordered pool, released when the copy goes out of scope (after the
// GEMM queued behind it: see device_memory::allocate). The allocation is
// rounded up to 64 elements: cuBLAS's bf16 kernels load 8 elements (16
// bytes) at a time and may load the whole vector that holds the last
// element (compute-sanitizer caught a read past an exact-size copy whose
// last row was shorter than its stride); those extra lanes are discarded.
class Bf16Copy {
 public:
  Bf16Copy(const Context& ctx, const float* values, long long count)
      : device_(ctx.device()),
        data_(device_memory::allocate(static_cast<std::size_t>((count + 63) / 64 * 64) * 2, device_)) {
    round_to_bf16(ctx, values, count, data_);
  }
  ~Bf16Copy() { device_memory::release(data_, device_); }
  Bf16Copy(const Bf16Copy&) = delete;
  Bf16Copy& operator=(const Bf16Copy&) = delete;
  const void* data() const { return data_; }

 private:
  Device device_;
  void* data_;
};

// Elements a row-major [rows, columns] matrix with row stride ld spans.
long long matrix_span(int rows, int columns, int ld) { return static_cast<long long>(rows - 1) * ld + columns; }
}  // namespace

// Under bf16 products (Context::bf16_products) f32 operands are rounded to
// bf16 copies and multiplied by cublasGemmEx with bf16 A and B, f32 C and f32
// accumulation (CUBLAS_COMPUTE_32F): the BF16 tensor-core products of the
// policy. CUBLAS_COMPUTE_32F_FAST_16BF on the f32 operands would only allow
// them: cuBLAS is then free to run TF32 or FP32 kernels that never round to
// bf16, and does (tests/framework/cuda_gemm_test.cpp checks the rounding).
template <typename T>
void gemm(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b,
          int ldb, T beta, T* c, int ldc) {
  if (m == 0 || n == 0) return;
  // Column-major view: C^T[n, m] = op(B)^T[n, k] * op(A)^T[k, m]; a row-major
  // row stride is the column-major leading dimension of the transpose.
  if constexpr (std::is_same_v<T, float>) {
    if (ctx.bf16_products() && k > 0) {
      const Bf16Copy a16(ctx, a, matrix_span(trans_a ? k : m, trans_a ? m : k, lda));
      const Bf16Copy b16(ctx, b, matrix_span(trans_b ? n : k, trans_b ? k : n, ldb));
      check_cublas(cublas_library().gemm_ex(cublas(ctx), op(trans_b), op(trans_a), n, m, k, &alpha, b16.data(),
                                            CUDA_R_16BF, ldb, a16.data(), CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, ldc,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (bf16 products)", __FILE__, __LINE__);
      return;
    }
  }
  check_cublas(gemm_call(cublas(ctx), op(trans_b), op(trans_a), n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc),
               "cublas gemm", __FILE__, __LINE__);
}

template <typename T>
void gemm(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, const T* b, T beta,
          T* c) {
  gemm<T>(ctx, trans_a, trans_b, m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

template <typename T>
void gemm_strided_batched(const Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a,
                          long long stride_a, const T* b, long long stride_b, T beta, T* c, long long stride_c,
                          int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  int lda = trans_a ? m : k;  // row-major leading dimension of A as stored
  int ldb = trans_b ? k : n;
  if constexpr (std::is_same_v<T, float>) {
    if (ctx.bf16_products() && k > 0) {
      const Bf16Copy a16(ctx, a, (batch - 1) * stride_a + matrix_span(trans_a ? k : m, trans_a ? m : k, lda));
      const Bf16Copy b16(ctx, b, (batch - 1) * stride_b + matrix_span(trans_b ? n : k, trans_b ? k : n, ldb));
      check_cublas(cublas_library().gemm_strided_batched_ex(cublas(ctx), op(trans_b), op(trans_a), n, m, k, &alpha,
                                                            b16.data(), CUDA_R_16BF, ldb, stride_b, a16.data(),
                                                            CUDA_R_16BF, lda, stride_a, &beta, c, CUDA_R_32F, n,
                                                            stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmStridedBatchedEx (bf16 products)", __FILE__, __LINE__);
      return;
    }
  }
  check_cublas(batched_call(cublas(ctx), op(trans_b), op(trans_a), n, m, k, &alpha, b, ldb, stride_b, a, lda, stride_a,
                            &beta, c, n, stride_c, batch),
               "cublas gemm strided batched", __FILE__, __LINE__);
}

template void gemm<float>(const Context&, bool, bool, int, int, int, float, const float*, int, const float*, int, float,
                          float*, int);
template void gemm<double>(const Context&, bool, bool, int, int, int, double, const double*, int, const double*, int,
                           double, double*, int);
template void gemm<float>(const Context&, bool, bool, int, int, int, float, const float*, const float*, float, float*);
template void gemm<double>(const Context&, bool, bool, int, int, int, double, const double*, const double*, double,
                           double*);
template void gemm_strided_batched<float>(const Context&, bool, bool, int, int, int, float, const float*, long long,
                                          const float*, long long, float, float*, long long, int);
template void gemm_strided_batched<double>(const Context&, bool, bool, int, int, int, double, const double*, long long,
                                           const double*, long long, double, double*, long long, int);

}  // namespace plexus::cuda
