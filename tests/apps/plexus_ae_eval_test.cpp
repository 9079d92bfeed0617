// plexus-ae eval end to end on a tiny folder: every image at full size
// (sizes that are not multiples of the stride included), a table with the
// mean, reconstructions whose PSNR the test recomputes independently, and a
// corrupt file skipped with its name in the warning.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/cli_runner.h"
#include "plexus/context.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus {
namespace {

using testing::contains;
using testing::ScratchFolder;

class PlexusAeEval : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::save_png(folder / "train/a.png", testing::position_image(48, 40));
    auto trained =
        run({"train", "--data", folder / "train", "--model", testing::test_model("tiny.json"), "--patch", "16",
             "--batch", "2", "--lr", "0.005", "--steps", "10", "--device", "cpu", "--out", folder / "run"});
    ASSERT_EQ(trained.exit_code, 0) << trained.describe();
    // 21x13 and 8x30: neither side a multiple of the stride (4) in the first.
    testing::save_png(folder / "eval/odd.png", testing::position_image(21, 13));
    testing::save_png(folder / "eval/nested/tall.png", testing::position_image(8, 30));
    testing::write_bytes(folder / "eval/broken.png", "not a png at all");
  }
  testing::CommandResult run(const std::vector<std::string>& args) {
    return testing::run_plexus_ae(args, folder.path());
  }
  ScratchFolder folder{"ae-eval"};
};

// The row of `name` in the table: {PSNR, bpp}.
std::pair<double, double> table_row(const std::string& table, const std::string& name) {
  std::istringstream lines(table);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string first, size;
    double psnr = 0, bpp = 0;
    if (fields >> first >> size >> psnr >> bpp && first == name) return {psnr, bpp};
  }
  ADD_FAILURE() << "no row '" << name << "' in:\n" << table;
  return {0, 0};
}

TEST_F(PlexusAeEval, EvaluatesEveryImageAtFullSizeAndWritesReconstructions) {
  auto result = run({"eval", "--model", folder / "run/model.safetensors", "--data", folder / "eval", "--out",
                     folder / "recon", "--device", "cpu"});
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_TRUE(contains(result.out, "PSNR")) << result.out;
  EXPECT_TRUE(contains(result.out, "21x13")) << result.out;
  EXPECT_TRUE(contains(result.out, "8x30")) << result.out;
  EXPECT_TRUE(contains(result.err, "skipping image '" + (folder / "eval/broken.png") + "'")) << result.err;
  EXPECT_TRUE(contains(result.err, "1 image(s) in '" + (folder / "eval") + "' were skipped")) << result.err;

  double psnr_sum = 0, bpp_sum = 0;
  for (const auto& [name, width, height] :
       std::vector<std::tuple<std::string, int, int>>{{"odd.png", 21, 13}, {"nested/tall.png", 8, 30}}) {
    const data::Image reconstruction = data::read_image(folder / ("recon/" + name));
    ASSERT_EQ(reconstruction.width, width) << name;
    ASSERT_EQ(reconstruction.height, height) << name;
    // PSNR from the PNG, computed here: 10 log10(255^2 / MSE) over all values.
    const data::Image original = testing::position_image(width, height);
    double squared = 0;
    for (std::size_t i = 0; i < original.pixels.size(); ++i) {
      const double d = double(original.pixels[i]) - reconstruction.pixels[i];
      squared += d * d;
    }
    const double expected_psnr = 10.0 * std::log10(255.0 * 255.0 * original.pixels.size() / squared);
    auto [psnr, bpp] = table_row(result.out, name);
    EXPECT_NEAR(psnr, expected_psnr, 0.001) << name;
    EXPECT_GT(bpp, 0.0) << name;
    psnr_sum += psnr;
    bpp_sum += bpp;
  }
  auto [mean_psnr, mean_bpp] = table_row(result.out, "mean");
  EXPECT_NEAR(mean_psnr, psnr_sum / 2, 0.002);
  EXPECT_NEAR(mean_bpp, bpp_sum / 2, 0.0002);

  auto summary = nlohmann::json::parse(testing::read_bytes(folder / "recon/eval.json"));
  EXPECT_EQ(summary["images"].size(), 2u);
  EXPECT_NEAR(summary["mean_psnr"].get<double>(), mean_psnr, 0.001);
  // Images under 161 pixels a side have no MS-SSIM (its 5 scales do not fit): "-" and null.
  EXPECT_TRUE(contains(result.out, "MS-SSIM")) << result.out;
  for (const auto& image : summary["images"]) EXPECT_TRUE(image["ms_ssim"].is_null()) << image.dump();
  EXPECT_TRUE(summary["mean_ms_ssim"].is_null()) << summary.dump();
}

// The table without its last two columns, the codec's wall times (which differ from run to run),
// and without the spaces before them, one fewer where a time has one more digit.
std::string without_times(const std::string& table) {
  std::istringstream lines(table);
  std::string line, result;
  while (std::getline(lines, line)) {
    for (int column = 0; column < 2; ++column) {
      const std::size_t end = line.find_last_not_of(' ');
      const std::size_t start = line.find_last_of(' ', end);
      line = line.substr(0, start == std::string::npos ? 0 : start);
    }
    const std::size_t last = line.find_last_not_of(' ');
    line.erase(last == std::string::npos ? 0 : last + 1);
    result += line + "\n";
  }
  return result;
}

TEST_F(PlexusAeEval, CheckpointEvaluatesLikeTheModelFileWithoutOut) {
  auto from_model =
      run({"eval", "--model", folder / "run/model.safetensors", "--data", folder / "eval", "--device", "cpu"});
  auto from_checkpoint =
      run({"eval", "--model", folder / "run/checkpoint.safetensors", "--data", folder / "eval", "--device", "cpu"});
  ASSERT_EQ(from_model.exit_code, 0) << from_model.describe();
  ASSERT_EQ(from_checkpoint.exit_code, 0) << from_checkpoint.describe();
  EXPECT_TRUE(contains(from_model.out, "enc ms")) << from_model.out;
  EXPECT_EQ(without_times(from_model.out), without_times(from_checkpoint.out));
  EXPECT_FALSE(std::filesystem::exists(folder / "recon"));
}

// On a GPU: train there, then evaluate the same model on CUDA and on the
// CPU. f32 kernels differ in the last bits, which can flip the rounding of
// an odd latent element, so the two agree closely rather than exactly.
TEST_F(PlexusAeEval, CudaTrainingAndEvaluationAgreeWithTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  auto trained = run({"train", "--data", folder / "train", "--model", testing::test_model("tiny.json"), "--patch", "16",
                      "--batch", "2", "--lr", "0.005", "--steps", "20", "--device", "cuda", "--out", folder / "gpu"});
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  auto on_gpu =
      run({"eval", "--model", folder / "gpu/model.safetensors", "--data", folder / "eval", "--device", "cuda"});
  auto on_cpu =
      run({"eval", "--model", folder / "gpu/model.safetensors", "--data", folder / "eval", "--device", "cpu"});
  ASSERT_EQ(on_gpu.exit_code, 0) << on_gpu.describe();
  ASSERT_EQ(on_cpu.exit_code, 0) << on_cpu.describe();
  auto [gpu_psnr, gpu_bpp] = table_row(on_gpu.out, "mean");
  auto [cpu_psnr, cpu_bpp] = table_row(on_cpu.out, "mean");
  EXPECT_NEAR(gpu_psnr, cpu_psnr, 0.05);
  EXPECT_NEAR(gpu_bpp, cpu_bpp, 0.02 * cpu_bpp);
}

TEST_F(PlexusAeEval, RefusesToWriteOverTheOriginals) {
  auto result =
      run({"eval", "--model", folder / "run/model.safetensors", "--data", folder / "eval", "--out", folder / "eval/"});
  EXPECT_EQ(result.exit_code, 1) << result.describe();
  EXPECT_TRUE(contains(result.err, "would overwrite the originals")) << result.err;
}

TEST_F(PlexusAeEval, FolderWithNoUsableImageIsAnError) {
  std::filesystem::create_directories(folder / "bad");
  testing::write_bytes(folder / "bad/x.jpg", "not a jpeg");
  auto result = run({"eval", "--model", folder / "run/model.safetensors", "--data", folder / "bad"});
  EXPECT_EQ(result.exit_code, 1) << result.describe();
  EXPECT_TRUE(contains(result.err, "'" + (folder / "bad") + "' holds no usable images")) << result.err;
}

}  // namespace
}  // namespace plexus
