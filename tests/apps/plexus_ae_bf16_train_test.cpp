// Training quality at --precision bf16 on CUDA: bmshj2018-factorized trained
// from the same seed on the same crops in bf16 and in strict f32 reaches the
// same training loss within a stated margin. The runs differ only in how
// products round their operands, so a larger gap means the BF16 products
// hurt training. A tf32 run is printed next to them: how far rounding alone
// (3 fewer mantissa bits than f32, truncated) moves the result. Then the same
// trained model is evaluated at f32 and at bf16: the same weights, so the
// PSNR and the rate differ by the bf16 rounding of the forward only.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli_runner.h"
#include "apps/metrics_log_reader.h"
#include "plexus/context.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using testing::ScratchFolder;

TEST(PlexusAeBf16Train, Bmshj2018FactorizedReachesTheF32TrainingLossWithinFivePercent) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ScratchFolder folder{"ae-bf16"};
  // 1,500 steps of 8 crops of 64x64 on the bundled training images, the last
  // fifth at a tenth of the learning rate so that the run ends settled; the
  // loss compared is the mean training loss (lambda * 255^2 * MSE + bpp) of
  // those last 300 steps, averaged over three seeds (the same three for every
  // precision). A few seconds per run on a GPU.
  constexpr int kSteps = 1500, kLogEvery = 100, kSettledWindows = 3;
  const std::vector<int> seeds{11, 12, 13};
  std::map<std::string, double> settled_loss;
  for (const char* precision : {"f32", "tf32", "bf16"}) {
    for (const int seed : seeds) {
      const std::string out = folder / (std::string(precision) + "-" + std::to_string(seed));
      const auto result = testing::run_plexus_ae({"train",
                                                  "--data",
                                                  std::string(PLEXUS_SOURCE_DIR) + "/data/train-sample",
                                                  "--model",
                                                  "bmshj2018-factorized",
                                                  "--patch",
                                                  "64",
                                                  "--batch",
                                                  "8",
                                                  "--lr",
                                                  "0.001",
                                                  "--lr-schedule",
                                                  "final",
                                                  "--lr-decay",
                                                  "0.1",
                                                  "--lr-final-fraction",
                                                  "0.2",
                                                  "--steps",
                                                  std::to_string(kSteps),
                                                  "--log-every",
                                                  std::to_string(kLogEvery),
                                                  "--seed",
                                                  std::to_string(seed),
                                                  "--device",
                                                  "cuda",
                                                  "--precision",
                                                  precision,
                                                  "--out",
                                                  out},
                                                 folder.path());
      ASSERT_EQ(result.exit_code, 0) << precision << " seed " << seed << ": " << result.describe();
      const auto train = testing::read_metrics(out + "/metrics.jsonl", "train");
      ASSERT_EQ(train.size(), static_cast<std::size_t>(kSteps / kLogEvery)) << precision;
      double sum = 0.0;
      for (std::size_t i = train.size() - kSettledWindows; i < train.size(); ++i) sum += train[i]["loss"].get<double>();
      const double settled = sum / kSettledWindows;
      settled_loss[precision] += settled / static_cast<double>(seeds.size());
      EXPECT_LT(settled, 1e-3 * train.front()["loss"].get<double>())
          << precision << " seed " << seed << ": the training loss did not fall";
      std::cout << precision << " seed " << seed << ": training loss " << train.front()["loss"]
                << " (first 100 steps) -> " << settled << " (last 300 steps, PSNR " << train.back()["psnr"] << " dB, "
                << train.back()["bpp"] << " bpp in the last 100)\n";
    }
    std::cout << precision << ": mean settled training loss " << settled_loss[precision] << "\n";
  }
  // The margin: 5% of the f32 loss. CUDA training is not bit-reproducible
  // run to run: over six recorded H100 runs of one seed the settled loss
  // ranged 3.41-3.58 at f32 and 3.44-3.62 at bf16 (tf32 3.44-3.61). Single runs of
  // f32 and bf16 once came 6.1% apart (3.413 against 3.622) with nothing
  // wrong, so the test compares means over three seeds, which narrows that
  // spread by about sqrt(3), and a BF16 penalty that matters still shows
  // beyond the margin.
  const double gap = (settled_loss["bf16"] - settled_loss["f32"]) / settled_loss["f32"];
  EXPECT_LT(std::abs(gap), 0.05) << "bf16 " << settled_loss["bf16"] << " against f32 " << settled_loss["f32"];
}

// plexus-ae eval of one model (the bf16-trained one) at f32 and at bf16 on
// the three bundled Kodak images: mean PSNR and estimated rate.
TEST(PlexusAeBf16Train, EvalAtBf16MatchesEvalAtF32OfTheSameModel) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ScratchFolder folder{"ae-bf16-eval"};
  const std::string source = PLEXUS_SOURCE_DIR;
  const auto trained = testing::run_plexus_ae({"train",
                                               "--data",
                                               source + "/data/train-sample",
                                               "--model",
                                               "bmshj2018-factorized",
                                               "--patch",
                                               "64",
                                               "--batch",
                                               "8",
                                               "--lr",
                                               "0.001",
                                               "--steps",
                                               "600",
                                               "--seed",
                                               "5",
                                               "--device",
                                               "cuda",
                                               "--precision",
                                               "bf16",
                                               "--out",
                                               folder / "run"},
                                              folder.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  std::map<std::string, nlohmann::json> eval;
  for (const char* precision : {"f32", "bf16"}) {
    const auto result = testing::run_plexus_ae(
        {"eval", "--model", folder / "run/model.safetensors", "--data", source + "/data/eval-sample", "--device",
         "cuda", "--precision", precision, "--out", folder / (std::string("eval-") + precision)},
        folder.path());
    ASSERT_EQ(result.exit_code, 0) << precision << ": " << result.describe();
    std::ifstream in(folder / (std::string("eval-") + precision + "/eval.json"));
    eval[precision] = nlohmann::json::parse(in);
    std::cout << "eval at " << precision << ": " << eval[precision]["mean_psnr"] << " dB, "
              << eval[precision]["mean_bpp"] << " bpp\n";
  }
  // A BF16 product is off by ~2e-3 relative, so the reconstruction and the
  // rounded latents move little: one H100 run gave 17.099 dB and 0.8070 bpp
  // at f32 against 17.107 dB and 0.8075 bpp at bf16. The margins, 0.1 dB and
  // 1% of the rate, are ten times that and far below a broken bf16 forward.
  const double psnr_f32 = eval["f32"]["mean_psnr"], psnr_bf16 = eval["bf16"]["mean_psnr"];
  const double bpp_f32 = eval["f32"]["mean_bpp"], bpp_bf16 = eval["bf16"]["mean_bpp"];
  EXPECT_LT(std::abs(psnr_bf16 - psnr_f32), 0.1);
  EXPECT_LT(std::abs(bpp_bf16 - bpp_f32), 0.01 * bpp_f32);
}

}  // namespace
}  // namespace plexus
