// A CodecModel computes its coding tables and integer network with the CPU
// products' blocking fixed (plexus/cpu_gemm_blocking.h), even when it is the
// first thing in the process to use them: its calibration sums long-K
// products, whose bits depend on Eigen's K blocking, and two CodecModels of
// one file must agree on the fingerprint (a file compressed on one device is
// decoded on another). The only test of this executable: nothing has fixed
// the blocking before it runs.
#include <Eigen/Core>
#include <gtest/gtest.h>

#include "codec/codec_model_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/codec/codec_model.h"

namespace plexus::codec {
namespace {

TEST(CodecModelBlocking, TheFirstCodecModelOfAProcessComputesTheTablesOfEveryLaterOne) {
  const Registry registry = builtin_registry();
  const ModelSpec spec =
      ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/bmshj2018-hyperprior.json");
  const TensorFile file = testing::untrained_weights(spec, registry, 13, {});
  // What Eigen reads on an Intel Xeon with 48 KiB of L1 and 2 MiB of L2 per
  // core; the blocking is fixed at what the project's machines read (32 KiB, 512 KiB).
  Eigen::setCpuCacheSizes(48 * 1024, 2048 * 1024, 300 * 1024 * 1024);
  const CodecModel first(spec, file, registry, Device::cpu(), "first");
  const CodecModel second(spec, file, registry, Device::cpu(), "second");
  EXPECT_EQ(first.fingerprint(), second.fingerprint());
  EXPECT_EQ(Eigen::l1CacheSize(), 32 * 1024);
}

}  // namespace
}  // namespace plexus::codec
