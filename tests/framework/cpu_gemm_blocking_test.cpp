// A Context fixes the cache sizes from which Eigen derives every matrix
// product's blocking (plexus/cpu_gemm_blocking.h), so the CPU kernels sum in
// the same order whatever caches the processor reports. The only test of
// this executable: the first Context of the process is the one that fixes them.
#include <Eigen/Core>
#include <gtest/gtest.h>

#include "plexus/context.h"

namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A product whose K (3,200, as a 5x5 convolution over 128 channels) spans
// several K blocks at these cache sizes.
Matrix product(const Matrix& a, const Matrix& b) { return a * b; }

TEST(CpuGemmBlocking, AContextReplacesTheCacheSizesTheProcessorReports) {
  Matrix a = Matrix::Random(128, 3200), b = Matrix::Random(3200, 96);
  // What Eigen reads on an Intel Xeon with 48 KiB of L1 and 2 MiB of L2 per
  // core; the project's machines read 32 KiB and 512 KiB.
  Eigen::setCpuCacheSizes(48 * 1024, 2048 * 1024, 300 * 1024 * 1024);
  const Matrix on_xeon = product(a, b);

  plexus::Context context(plexus::Device::cpu());
  EXPECT_EQ(Eigen::l1CacheSize(), 32 * 1024);
  EXPECT_EQ(Eigen::l2CacheSize(), 512 * 1024);
  EXPECT_EQ(Eigen::l3CacheSize(), 256 * 1024 * 1024);
  const Matrix fixed = product(a, b);
  // The premise: the blocking changes the sums' bits.
  EXPECT_GT((fixed - on_xeon).cwiseAbs().maxCoeff(), 0.0f);
}

}  // namespace
