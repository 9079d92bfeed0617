// A Context fixes the cache sizes from which Eigen derives every matrix
// product's blocking (plexus/cpu_gemm_blocking.h), so the CPU kernels sum in
// the same order whatever caches the processor reports. The only test of
// this executable that makes a Context or a product: the first Context of the
// process is the one that fixes them. The others decide whether a build's
// instruction set runs on a processor.
#include <Eigen/Core>
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "plexus/context.h"
#include "plexus/cpu_gemm_blocking.h"

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

// An x86-64-v3 build (-DPLEXUS_CPU_ARCH=auto on a machine with AVX2 and FMA)
// on a processor without either: the message names what it was built for and
// the option that gives a build it can run.
TEST(CpuInstructionSet, AnX8664V3BuildRefusesAProcessorWithoutAvx2OrFma) {
  for (const auto& [has_avx2, has_fma] : {std::pair{false, true}, std::pair{true, false}, std::pair{false, false}}) {
    const char* message = plexus::missing_instruction_set_message(true, true, has_avx2, has_fma);
    ASSERT_NE(message, nullptr) << "avx2 " << has_avx2 << ", fma " << has_fma;
    EXPECT_NE(std::string(message).find("x86-64-v3 (AVX2, FMA)"), std::string::npos) << message;
    EXPECT_NE(std::string(message).find("-DPLEXUS_CPU_ARCH=OFF"), std::string::npos) << message;
  }
  // Compiled for one of the two (another -march value): its absence alone refuses.
  EXPECT_NE(plexus::missing_instruction_set_message(true, false, false, true), nullptr);
  EXPECT_NE(plexus::missing_instruction_set_message(false, true, true, false), nullptr);
}

TEST(CpuInstructionSet, ABuildRunsWhereTheProcessorHasWhatItWasCompiledFor) {
  EXPECT_EQ(plexus::missing_instruction_set_message(true, true, true, true), nullptr);
  // The baseline build (-DPLEXUS_CPU_ARCH=OFF) runs on any x86-64 processor.
  for (bool has_avx2 : {false, true})
    for (bool has_fma : {false, true})
      EXPECT_EQ(plexus::missing_instruction_set_message(false, false, has_avx2, has_fma), nullptr);
  // Extra instructions are no reason to refuse.
  EXPECT_EQ(plexus::missing_instruction_set_message(true, false, true, false), nullptr);
}

}  // namespace
