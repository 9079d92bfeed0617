// plexus-ae trains the bundled mbt2018-mean model (a mean-scale hyperprior)
// on the CPU: two steps of one 64x64 crop, at the hyper-latent's stride 64,
// evaluates the trained model, and compresses and decompresses with it
// (format version 5: the hyper-latent's stream and the latent's). The bundled
// cheng2020-attn-mean (residual blocks and attention in graph layers, the same
// hyperprior) trains and codes too, and so does the bundled tcm-small (window
// attention: LayerNorm, WindowPartition, MatMul, Softmax, GELU); the bundled
// minnen2020-channel trains and codes (one stream per channel group), and so
// does the bundled checkerboard-mean-scale (the anchors' stream, then the
// other positions'), and the bundled mbt2018 (the latent position by position
// through its masked context, one stream), and eval reports its estimate
// beside its files.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "apps/cli_runner.h"
#include "apps/metrics_log_reader.h"

namespace plexus {
namespace {

using testing::contains;
using testing::ScratchFolder;

// plexus-ae train of `model` on folder/images into folder/run: `steps` steps of
// `batch` 64x64 crops on the CPU.
testing::CommandResult train_on_cpu(const ScratchFolder& folder, const std::string& model, int batch, int steps) {
  return testing::run_plexus_ae({"train", "--data", folder / "images", "--model", model, "--patch", "64", "--batch",
                                 std::to_string(batch), "--steps", std::to_string(steps), "--device", "cpu",
                                 "--threads", "1", "--lr-schedule", "final", "--out", folder / "run"},
                                folder.path());
}

// compress `image` with the trained folder/run/model.safetensors on the CPU:
// a version-5 file of `streams` coded streams, which decompress decodes to a `size` image.
void expect_round_trip(const ScratchFolder& folder, const std::string& image, int streams, const std::string& size) {
  auto compressed = testing::run_plexus_ae(
      {"compress", "--model", folder / "run/model.safetensors", image, "-o", folder / "b.pxae", "--device", "cpu"},
      folder.path());
  ASSERT_EQ(compressed.exit_code, 0) << compressed.describe();
  std::ifstream file(folder / "b.pxae", std::ios::binary);
  char header[38] = {};
  ASSERT_TRUE(file.read(header, sizeof header));
  EXPECT_EQ(header[4], 5) << "format version";
  EXPECT_EQ(header[36], streams) << "sections, one per coded stream";
  auto decompressed = testing::run_plexus_ae({"decompress", "--model", folder / "run/model.safetensors",
                                              folder / "b.pxae", "-o", folder / "b-decoded.png", "--device", "cpu"},
                                             folder.path());
  ASSERT_EQ(decompressed.exit_code, 0) << decompressed.describe();
  EXPECT_TRUE(contains(decompressed.out, size)) << decompressed.out;
}

TEST(PlexusAeMeanScaleHyperprior, TrainsOnTheCpu) {
  ScratchFolder folder{"ae-mbt2018-mean"};
  testing::save_png(folder / "images/a.png", testing::position_image(96, 80));
  testing::save_png(folder / "images/b.png", testing::position_image(70, 64));
  auto trained = train_on_cpu(folder, "mbt2018-mean", 1, 2);
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_TRUE(contains(trained.err, "stride 64")) << trained.err;
  ASSERT_TRUE(std::filesystem::exists(folder / "run/model.safetensors"));
  auto evaluated = testing::run_plexus_ae(
      {"eval", "--model", folder / "run/model.safetensors", "--data", folder / "images", "--device", "cpu"},
      folder.path());
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.describe();
  EXPECT_TRUE(contains(evaluated.out, "a.png")) << evaluated.out;
  EXPECT_TRUE(contains(evaluated.err, "mbt2018-mean")) << evaluated.err;
  expect_round_trip(folder, folder / "images/b.png", 2, "70x64");  // the mean-scale hyperprior: z, y
}

TEST(PlexusAeMeanScaleHyperprior, TheResidualAttentionSpecTrainsAndCodesOnTheCpu) {
  ScratchFolder folder{"ae-cheng2020"};
  testing::save_png(folder / "images/a.png", testing::position_image(64, 64));
  auto trained = train_on_cpu(folder, "cheng2020-attn-mean", 1, 1);
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_TRUE(contains(trained.err, "cheng2020-attn-mean")) << trained.err;
  EXPECT_FALSE(contains(trained.err, "cannot code")) << trained.err;
  expect_round_trip(folder, folder / "images/a.png", 2, "64x64");
}

// Two steps of two 64x64 crops (the attention blocks at 8x8, one window; the
// second block's shifted by 4) with a finite loss and rate (a falling loss is
// not asked of two steps); then a 70x50 file (padded to 128x64 inside:
// windows of 8 at 1/8) round-trips.
TEST(PlexusAeMeanScaleHyperprior, TheWindowAttentionSpecTrainsAndCodesOnTheCpu) {
  ScratchFolder folder{"ae-tcm-small"};
  testing::save_png(folder / "images/a.png", testing::position_image(96, 80));
  testing::save_png(folder / "images/b.png", testing::position_image(70, 64));
  auto trained = train_on_cpu(folder, "tcm-small", 2, 2);
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_TRUE(contains(trained.err, "tcm-small")) << trained.err;
  EXPECT_TRUE(contains(trained.err, "stride 64")) << trained.err;
  EXPECT_FALSE(contains(trained.err, "cannot code")) << trained.err;
  const auto logged = testing::read_metrics(folder / "run/metrics.jsonl", "train");
  ASSERT_FALSE(logged.empty());
  EXPECT_TRUE(std::isfinite(logged.back()["loss"].get<double>())) << logged.back().dump();
  EXPECT_GT(logged.back()["bpp"].get<double>(), 0.0) << logged.back().dump();
  testing::save_png(folder / "c.png", testing::position_image(70, 50));
  expect_round_trip(folder, folder / "c.png", 2, "70x50");  // the mean-scale hyperprior: z, y
}

TEST(PlexusAeMeanScaleHyperprior, TheChannelConditionalSpecTrainsAndCodesOnTheCpu) {
  ScratchFolder folder{"ae-minnen2020"};
  testing::save_png(folder / "images/a.png", testing::position_image(64, 64));
  auto trained = train_on_cpu(folder, "minnen2020-channel", 1, 1);
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_TRUE(contains(trained.err, "stride 64")) << trained.err;
  EXPECT_FALSE(contains(trained.err, "cannot code")) << trained.err;
  testing::save_png(folder / "b.png", testing::position_image(70, 50));
  expect_round_trip(folder, folder / "b.png", 11, "70x50");  // z, then the ten channel groups
}

TEST(PlexusAeMeanScaleHyperprior, TheCheckerboardSpecTrainsAndCodesOnTheCpu) {
  ScratchFolder folder{"ae-checkerboard"};
  testing::save_png(folder / "images/a.png", testing::position_image(96, 80));
  testing::save_png(folder / "images/b.png", testing::position_image(70, 64));
  auto trained = train_on_cpu(folder, "checkerboard-mean-scale", 1, 2);
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_TRUE(contains(trained.err, "checkerboard-mean-scale")) << trained.err;
  EXPECT_TRUE(contains(trained.err, "stride 64")) << trained.err;
  EXPECT_FALSE(contains(trained.err, "cannot code")) << trained.err;
  const auto logged = testing::read_metrics(folder / "run/metrics.jsonl", "train");
  ASSERT_FALSE(logged.empty());
  EXPECT_TRUE(std::isfinite(logged.back()["loss"].get<double>())) << logged.back().dump();
  expect_round_trip(folder, folder / "images/b.png", 3, "70x64");  // z, the anchors, the other positions
}

TEST(PlexusAeMeanScaleHyperprior, TheAutoregressiveSpecTrainsAndCodesOnTheCpu) {
  ScratchFolder folder{"ae-mbt2018"};
  testing::save_png(folder / "images/a.png", testing::position_image(96, 80));
  testing::save_png(folder / "images/b.png", testing::position_image(70, 64));
  auto trained = train_on_cpu(folder, "mbt2018", 1, 2);
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_TRUE(contains(trained.err, "mbt2018")) << trained.err;
  EXPECT_TRUE(contains(trained.err, "stride 64")) << trained.err;
  EXPECT_FALSE(contains(trained.err, "cannot code")) << trained.err;
  const auto logged = testing::read_metrics(folder / "run/metrics.jsonl", "train");
  ASSERT_FALSE(logged.empty());
  EXPECT_TRUE(std::isfinite(logged.back()["loss"].get<double>())) << logged.back().dump();
  expect_round_trip(folder, folder / "images/b.png", 2, "70x64");  // z, the latent
  // eval loads the weights into the model with its context input made an input, fed the files' latents.
  auto evaluated = testing::run_plexus_ae({"eval", "--model", folder / "run/model.safetensors", "--data",
                                           folder / "images", "--out", folder / "eval", "--device", "cpu"},
                                          folder.path());
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.describe();
  EXPECT_FALSE(contains(evaluated.err, "reporting the estimated rate only")) << evaluated.err;
  std::ifstream report(folder / "eval/eval.json");
  const nlohmann::json json = nlohmann::json::parse(report);
  ASSERT_EQ(json.at("images").size(), 2u) << json.dump();
  for (const nlohmann::json& image : json.at("images")) {
    EXPECT_GT(image.at("bpp").get<double>(), 0) << image.dump();
    EXPECT_GT(image.at("file").at("bpp").get<double>(), 0) << image.dump();
  }
}

}  // namespace
}  // namespace plexus
