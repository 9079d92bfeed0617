// plexus-ae trains the bundled mbt2018-mean model (a mean-scale hyperprior)
// on the CPU: two steps of one 64x64 crop, at the hyper-latent's stride 64,
// and evaluates the trained model.
#include <gtest/gtest.h>

#include "apps/cli_runner.h"

namespace plexus {
namespace {

using testing::contains;
using testing::ScratchFolder;

TEST(PlexusAeMeanScaleHyperprior, TrainsOnTheCpu) {
  ScratchFolder folder{"ae-mbt2018-mean"};
  testing::save_png(folder / "images/a.png", testing::position_image(96, 80));
  testing::save_png(folder / "images/b.png", testing::position_image(70, 64));
  auto trained = testing::run_plexus_ae({"train", "--data", folder / "images", "--model", "mbt2018-mean", "--patch",
                                         "64", "--batch", "1", "--steps", "2", "--device", "cpu", "--threads", "1",
                                         "--lr-schedule", "final", "--out", folder / "run"},
                                        folder.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_TRUE(contains(trained.err, "stride 64")) << trained.err;
  ASSERT_TRUE(std::filesystem::exists(folder / "run/model.safetensors"));
  auto evaluated = testing::run_plexus_ae(
      {"eval", "--model", folder / "run/model.safetensors", "--data", folder / "images", "--device", "cpu"},
      folder.path());
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.describe();
  EXPECT_TRUE(contains(evaluated.out, "a.png")) << evaluated.out;
  EXPECT_TRUE(contains(evaluated.err, "mbt2018-mean")) << evaluated.err;
}

}  // namespace
}  // namespace plexus
