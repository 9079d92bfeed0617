// plexus-ae with the bundled bmshj2018-hyperprior model on the CPU: it trains
// (stride 64), eval reports the estimated rate of both latents and the real
// files', compress and decompress code it; export --storage f16 halves the file
// within f16's rounding error, and a new run starts from the f16 weights. A
// spec the codec cannot code is named when its training starts.
#include <gtest/gtest.h>

#include <cmath>

#include "apps/cli_runner.h"
#include "plexus/checkpoint.h"

namespace plexus {
namespace {

using testing::contains;
using testing::ScratchFolder;

class PlexusAeHyperprior : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::save_png(folder / "images/a.png", testing::position_image(96, 80));
    testing::save_png(folder / "images/b.png", testing::position_image(70, 64));
  }
  testing::CommandResult run(const std::vector<std::string>& args) { return testing::run_plexus_ae(args, folder.path()); }
  ScratchFolder folder{"ae-hyperprior"};
};

TEST_F(PlexusAeHyperprior, TrainsEvaluatesCompressesAndExportsF16) {
  auto trained = run({"train", "--data", folder / "images", "--model", "bmshj2018-hyperprior", "--patch", "64",
                      "--batch", "1", "--steps", "2", "--device", "cpu", "--threads", "1", "--lr-schedule", "final",
                      "--out", folder / "run"});
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_TRUE(contains(trained.err, "stride 64")) << trained.err;
  EXPECT_FALSE(contains(trained.err, "cannot code it")) << trained.err;  // a spec the codec handles: no warning
  ASSERT_TRUE(std::filesystem::exists(folder / "run/model.safetensors"));

  auto patch = run({"train", "--data", folder / "images", "--model", "bmshj2018-hyperprior", "--patch", "48",
                    "--steps", "1", "--device", "cpu", "--out", folder / "bad"});
  EXPECT_EQ(patch.exit_code, 1) << patch.describe();
  EXPECT_TRUE(contains(patch.err, "is not a multiple of the model's stride 64")) << patch.err;

  auto evaluated = run({"eval", "--model", folder / "run/model.safetensors", "--data", folder / "images", "--device", "cpu"});
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.describe();
  EXPECT_TRUE(contains(evaluated.out, "a.png")) << evaluated.out;
  EXPECT_FALSE(contains(evaluated.err, "reporting the estimated rate only")) << evaluated.err;

  auto compressed = run({"compress", "--model", folder / "run/model.safetensors", folder / "images/a.png", "-o",
                         folder / "a.pxae", "--device", "cpu"});
  ASSERT_EQ(compressed.exit_code, 0) << compressed.describe();
  auto decompressed = run({"decompress", "--model", folder / "run/model.safetensors", folder / "a.pxae", "-o",
                           folder / "a-decoded.png", "--device", "cpu"});
  ASSERT_EQ(decompressed.exit_code, 0) << decompressed.describe();
  EXPECT_TRUE(contains(decompressed.out, "96x80")) << decompressed.out;

  auto in_place = run({"export", "--model", folder / "run/model.safetensors", "--storage", "f16"});
  EXPECT_EQ(in_place.exit_code, 1) << in_place.describe();
  EXPECT_TRUE(contains(in_place.err, "so that the full-precision model is kept")) << in_place.err;

  auto exported = run({"export", "--model", folder / "run/model.safetensors", "--out", folder / "f16.safetensors",
                       "--storage", "f16"});
  ASSERT_EQ(exported.exit_code, 0) << exported.describe();
  EXPECT_TRUE(contains(exported.out, "128 channels of coding tables and the integer network's calibration, "
                                     "model fingerprint")) << exported.out;
  EXPECT_TRUE(contains(exported.out, "parameters stored as f16")) << exported.out;
  const TensorFile full = load_safetensors(folder / "run/model.safetensors");
  const TensorFile half = load_safetensors(folder / "f16.safetensors");
  EXPECT_LT(std::filesystem::file_size(folder / "f16.safetensors"),
            0.55 * static_cast<double>(std::filesystem::file_size(folder / "run/model.safetensors")));
  ASSERT_EQ(half.tensors.size(), full.tensors.size());
  for (const auto& [name, tensor] : full.tensors) {
    if (name.find(".coding.") != std::string::npos) continue;  // tables rebuilt from the f16 weights
    const std::vector<double> a = tensor.to_values(), b = half.tensors.at(name).to_values();
    ASSERT_EQ(a.size(), b.size()) << name;
    // Round to nearest: within half an f16 step, 2^-11 relative for normals, 2^-25 absolute below.
    for (std::size_t i = 0; i < a.size(); ++i)
      ASSERT_LE(std::abs(a[i] - b[i]), std::ldexp(std::abs(a[i]), -11) + std::ldexp(1.0, -25)) << name << " " << i;
  }

  // The integer network calibrated on images instead of the prior's samples.
  auto calibrated = run({"export", "--model", folder / "f16.safetensors", "--out", folder / "calibrated.safetensors",
                         "--calibration-images", folder / "images"});
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.describe();
  EXPECT_TRUE(contains(load_safetensors(folder / "calibrated.safetensors").metadata.at("plexus_ae.integer_hyper_synthesis"),
                       "2 image(s)"));
  auto with_calibrated = run({"compress", "--model", folder / "calibrated.safetensors", folder / "images/b.png", "-o",
                              folder / "b.pxae", "--device", "cpu"});
  ASSERT_EQ(with_calibrated.exit_code, 0) << with_calibrated.describe();
  ASSERT_EQ(run({"decompress", "--model", folder / "calibrated.safetensors", folder / "b.pxae", "-o",
                 folder / "b-decoded.png", "--device", "cpu"}).exit_code, 0);

  auto from_half = run({"train", "--data", folder / "images", "--model", "bmshj2018-hyperprior", "--patch", "64",
                        "--batch", "1", "--steps", "1", "--device", "cpu", "--threads", "1", "--init-from",
                        folder / "f16.safetensors", "--out", folder / "from-half"});
  ASSERT_EQ(from_half.exit_code, 0) << from_half.describe();
  EXPECT_TRUE(contains(from_half.err, "--init-from '" + (folder / "f16.safetensors") + "'")) << from_half.err;
  auto both = run({"train", "--init-from", folder / "f16.safetensors", "--resume", "--out", folder / "run"});
  EXPECT_EQ(both.exit_code, 1) << both.describe();
  EXPECT_TRUE(contains(both.err, "--init-from starts a new run from another model's weights")) << both.err;
}

TEST_F(PlexusAeHyperprior, ASpecTheCodecCannotCodeIsNamedBeforeTheFirstStep) {
  auto trained = run({"train", "--data", folder / "images", "--model",
                      testing::test_model("tiny_hyperprior_means.json"), "--patch", "64", "--batch", "1", "--steps", "1", "--device", "cpu", "--threads", "1",
                      "--out", folder / "means"});
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();  // it trains all the same
  const std::string warning =
      "warning: model 'tiny-hyperprior-means' trains, but compress/export cannot code it yet: its latent 'y_hat' must "
      "be the output of a QuantizeAroundMean node";
  const std::size_t warned = trained.err.find(warning);
  ASSERT_NE(warned, std::string::npos) << trained.err;
  EXPECT_EQ(trained.err.find(warning, warned + 1), std::string::npos) << "warned twice:\n" << trained.err;
  const std::size_t first_step = trained.err.find("\nstep ");
  ASSERT_NE(first_step, std::string::npos) << trained.err;
  EXPECT_LT(warned, first_step) << trained.err;
}

}  // namespace
}  // namespace plexus
