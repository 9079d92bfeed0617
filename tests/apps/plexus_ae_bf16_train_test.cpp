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
  // those last 300 steps, on the same crops in every run. A few seconds per
  // run on a GPU.
  constexpr int kSteps = 1500, kLogEvery = 100, kSettledWindows = 3;
  std::map<std::string, double> settled_loss;
  for (const char* precision : {"f32", "tf32", "bf16"}) {
    const std::string out = folder / precision;
    const auto result = testing::run_plexus_ae(
        {"train", "--data", std::string(PLEXUS_SOURCE_DIR) + "/data/train-sample", "--model", "bmshj2018-factorized",
         "--patch", "64", "--batch", "8", "--lr", "0.001", "--lr-schedule", "final", "--lr-decay", "0.1",
         "--lr-final-fraction", "0.2", "--steps", std::to_string(kSteps), "--log-every", std::to_string(kLogEvery),
         "--seed", "11", "--device", "cuda", "--precision", precision, "--out", out},
        folder.path());
    ASSERT_EQ(result.exit_code, 0) << precision << ": " << result.describe();
    const auto train = testing::read_metrics(out + "/metrics.jsonl", "train");
    ASSERT_EQ(train.size(), static_cast<std::size_t>(kSteps / kLogEvery)) << precision;
    double sum = 0.0;
    for (std::size_t i = train.size() - kSettledWindows; i < train.size(); ++i) sum += train[i]["loss"].get<double>();
    settled_loss[precision] = sum / kSettledWindows;
    EXPECT_LT(settled_loss[precision], 1e-3 * train.front()["loss"].get<double>())
        << precision << ": the training loss did not fall";
    std::cout << precision << ": training loss " << train.front()["loss"] << " (first 100 steps) -> "
              << settled_loss[precision] << " (last 300 steps, PSNR " << train.back()["psnr"] << " dB, "
              << train.back()["bpp"] << " bpp in the last 100)\n";
  }
  // The margin: 5% of the f32 loss. Two H100 runs of this test gave f32
  // 3.548 and 3.442, tf32 3.482 (-1.9%) and 3.495 (+1.5%), bf16 3.522
  // (-0.7%) and 3.453 (+0.3%): the rounding of TF32 alone moves the end of a
  // short run by about 2% (CUDA training is not bit-reproducible run to run
  // either), so the margin is about twice that, and a BF16 penalty that
  // matters shows beyond it.
  const double gap = (settled_loss["bf16"] - settled_loss["f32"]) / settled_loss["f32"];
  EXPECT_LT(std::abs(gap), 0.05) << "bf16 " << settled_loss["bf16"] << " against f32 " << settled_loss["f32"];
}

// plexus-ae eval of one model (the bf16-trained one) at f32 and at bf16 on
// the three bundled Kodak images: mean PSNR and estimated rate.
TEST(PlexusAeBf16Train, EvalAtBf16MatchesEvalAtF32OfTheSameModel) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  ScratchFolder folder{"ae-bf16-eval"};
  const std::string source = PLEXUS_SOURCE_DIR;
  const auto trained = testing::run_plexus_ae(
      {"train", "--data", source + "/data/train-sample", "--model", "bmshj2018-factorized", "--patch", "64",
       "--batch", "8", "--lr", "0.001", "--steps", "600", "--seed", "5", "--device", "cuda", "--precision", "bf16",
       "--out", folder / "run"},
      folder.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  std::map<std::string, nlohmann::json> eval;
  for (const char* precision : {"f32", "bf16"}) {
    const auto result = testing::run_plexus_ae({"eval", "--model", folder / "run/model.safetensors", "--data",
                                                source + "/data/eval-sample", "--device", "cuda", "--precision",
                                                precision, "--out", folder / (std::string("eval-") + precision)},
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
