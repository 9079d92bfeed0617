// Training quality at --precision bf16 on CUDA: bmshj2018-factorized trained
// from the same seed on the same crops in bf16 and in strict f32 reaches the
// same validation loss within a stated margin. The runs differ only in how
// products round their operands, so a larger gap means the BF16 products
// hurt training. A tf32 run is printed next to them: how far rounding alone
// (3 fewer mantissa bits than f32, truncated) moves the result.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli_runner.h"
#include "plexus/context.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using testing::ScratchFolder;

// The entries of one kind ("train" or "val") of a metrics.jsonl.
std::vector<nlohmann::json> metrics(const std::string& path, const std::string& kind) {
  std::vector<nlohmann::json> entries;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto entry = nlohmann::json::parse(line);
    if (entry["kind"] == kind) entries.push_back(entry);
  }
  return entries;
}

TEST(PlexusAeBf16Train, Bmshj2018FactorizedReachesTheF32ValidationLossWithinFivePercent) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ScratchFolder folder{"ae-bf16"};
  const std::string source = PLEXUS_SOURCE_DIR;
  // 1,500 steps of 8 crops of 64x64 on the bundled training images, the last
  // fifth at a tenth of the learning rate so that the run ends settled, then
  // the validation loss (lambda * 255^2 * MSE + bpp) on the three bundled
  // Kodak images at full size: a few seconds per run on a GPU.
  constexpr int kSteps = 1500;
  std::map<std::string, double> val_loss;
  for (const char* precision : {"f32", "tf32", "bf16"}) {
    const std::string out = folder / precision;
    const auto result = testing::run_plexus_ae(
        {"train", "--data", source + "/data/train-sample", "--val", source + "/data/eval-sample", "--val-every",
         std::to_string(kSteps), "--model", "bmshj2018-factorized", "--patch", "64", "--batch", "8", "--lr", "0.001",
         "--lr-schedule", "final", "--lr-decay", "0.1", "--lr-final-fraction", "0.2", "--steps",
         std::to_string(kSteps), "--log-every", "100", "--seed", "11", "--device", "cuda", "--precision", precision,
         "--out", out},
        folder.path());
    ASSERT_EQ(result.exit_code, 0) << precision << ": " << result.describe();
    const auto train = metrics(out + "/metrics.jsonl", "train");
    const auto val = metrics(out + "/metrics.jsonl", "val");
    ASSERT_FALSE(train.empty()) << precision;
    ASSERT_FALSE(val.empty()) << precision;
    val_loss[precision] = val.back()["loss"].get<double>();
    EXPECT_LT(train.back()["loss"].get<double>(), 0.1 * train.front()["loss"].get<double>())
        << precision << ": the training loss did not fall";
    std::cout << precision << ": training loss " << train.front()["loss"] << " (first 100 steps) -> "
              << train.back()["loss"] << " (last 100); validation loss " << val_loss[precision] << ", PSNR "
              << val.back()["psnr"] << " dB, " << val.back()["bpp"] << " bpp\n";
  }
  // The margin: 5% of the f32 validation loss. A BF16 product is off by
  // ~2e-3 relative (tests/layers/tensor_core_reference.h), noise far below
  // the quantisation noise the model is trained with; a penalty that
  // matters shows as a loss above f32's beyond the margin.
  const double gap = (val_loss["bf16"] - val_loss["f32"]) / val_loss["f32"];
  EXPECT_LT(std::abs(gap), 0.05) << "bf16 " << val_loss["bf16"] << " against f32 " << val_loss["f32"];
}

}  // namespace
}  // namespace plexus
