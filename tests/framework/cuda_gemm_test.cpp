// plexus::cuda::gemm and gemm_strided_batched under each precision, on values
// whose products tell the three apart exactly: with every element of A equal
// to a, of B equal to 1, every element of C is K * round(a), where round is
// the operand rounding the products apply:
//   a = 1 + 2^-12: exact in f32; TF32 (10 mantissa bits) drops it -> 1; bf16 too;
//   a = 1 + 2^-9:  exact in f32 and TF32; bf16 (7 mantissa bits, nearest) -> 1.
// K * a is exact in f32 for K = 64 (and accumulation is f32 in every mode), so
// each expected value is exact. Also the explicit row strides of gemm, with
// the padding columns of C checked untouched. CUDA only; skips without a GPU.
// And cuBLAS's loader (cuda::cublas_library), which needs no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "plexus/context.h"
#include "plexus/testing/gtest_helpers.h"
#if PLEXUS_WITH_CUDA
#include "plexus/cuda/blas.h"
#include "plexus/cuda/cuda_check.h"
#endif

namespace plexus {
namespace {

#if PLEXUS_WITH_CUDA
constexpr int kM = 24, kN = 40, kK = 64;

Tensor filled(std::int64_t rows, std::int64_t columns, double value) {
  return Tensor::from_values(std::vector<double>(static_cast<std::size_t>(rows * columns), value), {rows, columns},
                             DType::f32, Device::cuda());
}

// The value every element of C = A B takes at `precision` for A filled with `a`.
double expected_product(Precision precision, double a) {
  const bool tf32_drop = a - 1 < std::ldexp(1.0, -11);  // below half of TF32's last bit (2^-10): -> 1
  const bool bf16_drop = a - 1 < std::ldexp(1.0, -8);   // below half of bf16's last bit (2^-7): -> 1
  switch (precision) {
    case Precision::f32:
      return kK * a;
    case Precision::tf32:
      return tf32_drop ? kK : kK * a;
    case Precision::bf16:
      return bf16_drop ? kK : kK * a;
  }
  return std::nan("");
}

std::string case_name(Precision precision, double a) {
  return std::string(precision_name(precision)) + ", a = 1 + " + std::to_string(a - 1);
}

TEST(CudaGemm, ProductsFollowThePrecisionCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  for (Precision precision : {Precision::f32, Precision::tf32, Precision::bf16}) {
    for (double a : {1 + std::ldexp(1.0, -12), 1 + std::ldexp(1.0, -9)}) {
      Context ctx(Device::cuda());
      ctx.set_precision(precision);
      const Tensor lhs = filled(kM, kK, a), rhs = filled(kK, kN, 1.0);
      Tensor c = filled(kM, kN, std::nan(""));
      cuda::gemm<float>(ctx, false, false, kM, kN, kK, 1.0f, lhs.data<float>(), rhs.data<float>(), 0.0f,
                        c.data<float>());
      ctx.synchronize();
      const double expected = expected_product(precision, a);
      for (double value : c.to_values()) ASSERT_EQ(value, expected) << "gemm, " << case_name(precision, a);

      // Two batches, the second with B transposed in storage (all ones either way).
      Tensor batched = filled(2 * kM, kN, std::nan(""));
      const Tensor lhs2 = filled(2 * kM, kK, a);
      cuda::gemm_strided_batched<float>(ctx, false, true, kM, kN, kK, 1.0f, lhs2.data<float>(), kM * kK,
                                        rhs.data<float>(), 0, 0.0f, batched.data<float>(), kM * kN, 2);
      ctx.synchronize();
      for (double value : batched.to_values())
        ASSERT_EQ(value, expected) << "gemm_strided_batched, " << case_name(precision, a);
    }
  }
}

TEST(CudaGemm, ExplicitRowStridesLeaveThePaddingAloneCuda) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // C [kM, kN] in the first kN columns of a [kM, kN + 5] buffer; A read from
  // the first kK columns of a [kM, kK + 3] buffer whose extra columns would
  // change the result if read.
  const int lda = kK + 3, ldc = kN + 5;
  std::vector<double> a_values(static_cast<std::size_t>(kM * lda), 1000.0);
  for (int r = 0; r < kM; ++r)
    for (int k = 0; k < kK; ++k) a_values[static_cast<std::size_t>(r * lda + k)] = 0.5 + r;
  const Tensor lhs = Tensor::from_values(a_values, {kM, lda}, DType::f32, Device::cuda());
  const Tensor rhs = filled(kK, kN, 1.0);
  Tensor c = filled(kM, ldc, -7.0);
  Context ctx(Device::cuda());
  cuda::gemm<float>(ctx, false, false, kM, kN, kK, 1.0f, lhs.data<float>(), lda, rhs.data<float>(), kN, 0.0f,
                    c.data<float>(), ldc);
  ctx.synchronize();
  const std::vector<double> values = c.to_values();
  for (int r = 0; r < kM; ++r)
    for (int col = 0; col < ldc; ++col) {
      const double expected = col < kN ? kK * (0.5 + r) : -7.0;
      ASSERT_EQ(values[static_cast<std::size_t>(r * ldc + col)], expected) << "row " << r << ", column " << col;
    }
}

// cuBLAS as opened on first use (cuda::cublas_library): a library that is not
// there, or lacks an entry point, is a DeviceError naming it and the loader's
// reason; the toolkit's own resolves every entry point, once, and
// check_cublas names a failed status through it. These need the toolkit's
// cuBLAS, not a GPU.
TEST(CublasLibrary, AMissingLibraryIsADeviceErrorNamingIt) {
  testing::expect_error<DeviceError>([] { cuda::load_cublas_library("libplexus-no-such-cublas.so.13"); },
                                     {"cuBLAS (libplexus-no-such-cublas.so.13) cannot be loaded",
                                      "libplexus-no-such-cublas.so.13: cannot open shared object file"});
  // A library that loads but is not cuBLAS: the first entry point it lacks.
  testing::expect_error<DeviceError>([] { cuda::load_cublas_library("libm.so.6"); },
                                     {"cuBLAS (libm.so.6) cannot be loaded", "it has no cublasCreate_v2"});
}

TEST(CublasLibrary, TheToolkitsResolvesEveryEntryPointOnce) {
  EXPECT_EQ(cuda::cublas_library_name(), "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
  const cuda::CublasLibrary& blas = cuda::cublas_library();
  EXPECT_EQ(&blas, &cuda::cublas_library());
  const std::vector<std::pair<const char*, bool>> resolved{
      {"create", blas.create != nullptr},
      {"destroy", blas.destroy != nullptr},
      {"set_stream", blas.set_stream != nullptr},
      {"set_workspace", blas.set_workspace != nullptr},
      {"set_math_mode", blas.set_math_mode != nullptr},
      {"sgemm", blas.sgemm != nullptr},
      {"dgemm", blas.dgemm != nullptr},
      {"sgemm_strided_batched", blas.sgemm_strided_batched != nullptr},
      {"dgemm_strided_batched", blas.dgemm_strided_batched != nullptr},
      {"gemm_ex", blas.gemm_ex != nullptr},
      {"gemm_strided_batched_ex", blas.gemm_strided_batched_ex != nullptr},
      {"status_name", blas.status_name != nullptr},
      {"status_string", blas.status_string != nullptr}};
  for (const auto& [name, found] : resolved) EXPECT_TRUE(found) << name;
  ASSERT_TRUE(blas.status_name && blas.create);
  EXPECT_STREQ(blas.status_name(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  testing::expect_error<DeviceError>(
      [] { cuda::check_cublas(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm", "blas.cpp", 7); },
      {"cublasSgemm failed: CUBLAS_STATUS_INVALID_VALUE (", ") at blas.cpp:7"});
  EXPECT_NO_THROW(cuda::check_cublas(CUBLAS_STATUS_SUCCESS, "cublasSgemm", "blas.cpp", 7));
}
#else
TEST(CudaGemm, ProductsFollowThePrecisionCuda) { GTEST_SKIP() << testing::kNoGpuReason; }
#endif

}  // namespace
}  // namespace plexus
