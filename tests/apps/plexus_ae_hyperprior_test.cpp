// plexus-ae with the bundled bmshj2018-hyperprior model on the CPU: it trains
// (stride 64), eval reports the estimated rate of both latents and the real
// files', compress and decompress code it; export --storage f16 halves the file
// within f16's rounding error, and a new run starts from the f16 weights;
// export --storage int8 stores each convolution weight as I8 with a scale per
// output channel (a quarter of the f32 file) and its files code and decode. A
// spec the codec cannot code is named when its training starts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "apps/cli_runner.h"
#include "plexus/checkpoint.h"

namespace plexus {
namespace {

using testing::contains;
using testing::ScratchFolder;

// The JSON header of a safetensors file, as written.
nlohmann::json safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  std::uint64_t size = 0;
  for (int i = 0; i < 8 && i < static_cast<int>(bytes.size()); ++i)
    size |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return nlohmann::json::parse(bytes.substr(8, size));
}

class PlexusAeHyperprior : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::save_png(folder / "images/a.png", testing::position_image(96, 80));
    testing::save_png(folder / "images/b.png", testing::position_image(70, 64));
  }
  testing::CommandResult run(const std::vector<std::string>& args) {
    return testing::run_plexus_ae(args, folder.path());
  }
  ScratchFolder folder{"ae-hyperprior"};
};

TEST_F(PlexusAeHyperprior, TrainsEvaluatesCompressesAndExportsF16) {
  auto trained =
      run({"train", "--data", folder / "images", "--model", "bmshj2018-hyperprior", "--patch", "64", "--batch", "1",
           "--steps", "2", "--device", "cpu", "--threads", "1", "--lr-schedule", "final", "--out", folder / "run"});
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_TRUE(contains(trained.err, "stride 64")) << trained.err;
  EXPECT_FALSE(contains(trained.err, "cannot code it")) << trained.err;  // a spec the codec handles: no warning
  ASSERT_TRUE(std::filesystem::exists(folder / "run/model.safetensors"));

  auto patch = run({"train", "--data", folder / "images", "--model", "bmshj2018-hyperprior", "--patch", "48", "--steps",
                    "1", "--device", "cpu", "--out", folder / "bad"});
  EXPECT_EQ(patch.exit_code, 1) << patch.describe();
  EXPECT_TRUE(contains(patch.err, "is not a multiple of the model's stride 64")) << patch.err;

  auto evaluated =
      run({"eval", "--model", folder / "run/model.safetensors", "--data", folder / "images", "--device", "cpu"});
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

  auto exported = run(
      {"export", "--model", folder / "run/model.safetensors", "--out", folder / "f16.safetensors", "--storage", "f16"});
  ASSERT_EQ(exported.exit_code, 0) << exported.describe();
  EXPECT_TRUE(contains(exported.out, "128 channels of coding tables and the integer network's calibration, "
                                     "model fingerprint"))
      << exported.out;
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
  EXPECT_TRUE(
      contains(load_safetensors(folder / "calibrated.safetensors").metadata.at("plexus_ae.integer_hyper_synthesis"),
               "2 image(s)"));
  auto with_calibrated = run({"compress", "--model", folder / "calibrated.safetensors", folder / "images/b.png", "-o",
                              folder / "b.pxae", "--device", "cpu"});
  ASSERT_EQ(with_calibrated.exit_code, 0) << with_calibrated.describe();
  ASSERT_EQ(run({"decompress", "--model", folder / "calibrated.safetensors", folder / "b.pxae", "-o",
                 folder / "b-decoded.png", "--device", "cpu"})
                .exit_code,
            0);

  auto from_half = run({"train", "--data", folder / "images", "--model", "bmshj2018-hyperprior", "--patch", "64",
                        "--batch", "1", "--steps", "1", "--device", "cpu", "--threads", "1", "--init-from",
                        folder / "f16.safetensors", "--out", folder / "from-half"});
  ASSERT_EQ(from_half.exit_code, 0) << from_half.describe();
  EXPECT_TRUE(contains(from_half.err, "--init-from '" + (folder / "f16.safetensors") + "'")) << from_half.err;
  auto both = run({"train", "--init-from", folder / "f16.safetensors", "--resume", "--out", folder / "run"});
  EXPECT_EQ(both.exit_code, 1) << both.describe();
  EXPECT_TRUE(contains(both.err, "--init-from starts a new run from another model's weights")) << both.err;
}

TEST_F(PlexusAeHyperprior, ExportsInt8WeightsThatCompressAndDecompress) {
  auto trained =
      run({"train", "--data", folder / "images", "--model", "bmshj2018-hyperprior", "--patch", "64", "--batch", "1",
           "--steps", "2", "--device", "cpu", "--threads", "1", "--lr-schedule", "final", "--out", folder / "run"});
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  const std::string full_path = folder / "run/model.safetensors", int8_path = folder / "int8.safetensors";
  auto in_place = run({"export", "--model", full_path, "--storage", "int8"});
  EXPECT_EQ(in_place.exit_code, 1) << in_place.describe();
  EXPECT_TRUE(contains(in_place.err, "--storage int8 rounds the weights")) << in_place.err;

  auto exported = run({"export", "--model", full_path, "--out", int8_path, "--storage", "int8"});
  ASSERT_EQ(exported.exit_code, 0) << exported.describe();
  EXPECT_TRUE(contains(exported.out, "parameters stored as int8")) << exported.out;
  EXPECT_LT(std::filesystem::file_size(int8_path), 0.3 * static_cast<double>(std::filesystem::file_size(full_path)));

  // By role: each Conv2d weight is I8 with scales [Co, 1, 1, 1], each
  // ConvTranspose2d weight I8 with [1, Co, 1, 1] (Co: the node's
  // out_channels); the other parameters F16; the coding tables as written.
  const TensorFile full = load_safetensors(full_path);
  const ModelSpec spec = spec_from_checkpoint(full, full_path);
  const nlohmann::json header = safetensors_header(int8_path);
  int weights = 0;
  for (const NodeSpec& node : spec.nodes) {
    if (node.type != "Conv2d" && node.type != "ConvTranspose2d") continue;
    const std::string name = node.name + ".weight";
    ASSERT_TRUE(header.contains(name)) << name;
    EXPECT_EQ(header[name]["dtype"], "I8") << name;
    const std::int64_t co = node.params.at("out_channels").get<std::int64_t>();
    const Shape scale_shape = node.type == "Conv2d" ? Shape{co, 1, 1, 1} : Shape{1, co, 1, 1};
    EXPECT_EQ(header[name + ".int8_scale"]["dtype"], "F32") << name;
    EXPECT_EQ(header[name + ".int8_scale"]["shape"].get<Shape>(), scale_shape) << name;
    ++weights;
  }
  EXPECT_EQ(weights, 14);  // the bundled spec's 7 Conv2d and 7 ConvTranspose2d nodes
  const TensorFile stored = load_safetensors(int8_path);
  ASSERT_EQ(stored.tensors.size(), full.tensors.size());
  for (const auto& [name, tensor] : full.tensors) {
    if (name.find(".coding.") != std::string::npos) {
      EXPECT_NE(header[name]["dtype"], "F16") << name;
      continue;  // rebuilt from the stored weights
    }
    const std::string dtype = header[name]["dtype"];
    const std::vector<double> a = tensor.to_values(), b = stored.tensors.at(name).to_values();
    ASSERT_EQ(a.size(), b.size()) << name;
    double largest = 0;
    for (double v : a) largest = std::max(largest, std::abs(v));
    for (std::size_t i = 0; i < a.size(); ++i) {
      // I8: within half a step of its channel's scale, itself at most the tensor's largest / 127.
      const double bound =
          dtype == "I8" ? largest / 254 * (1 + 1e-6) : std::ldexp(std::abs(a[i]), -11) + std::ldexp(1.0, -25);
      ASSERT_LE(std::abs(a[i] - b[i]), bound) << name << " (" << dtype << ") " << i;
    }
    if (dtype != "I8") EXPECT_EQ(dtype, "F16") << name;
  }

  // Calibrated on images, the coding tables and the integer network come
  // from the weights the file loads: re-exporting its loaded weights as f32
  // with the same images gives the same tables and calibration, bit for bit.
  const std::string calibrated = folder / "int8-calibrated.safetensors", again = folder / "again.safetensors";
  ASSERT_EQ(run({"export", "--model", full_path, "--out", calibrated, "--storage", "int8", "--calibration-images",
                 folder / "images"})
                .exit_code,
            0);
  ASSERT_EQ(run({"export", "--model", calibrated, "--out", again, "--storage", "f32", "--calibration-images",
                 folder / "images"})
                .exit_code,
            0);
  const TensorFile first = load_safetensors(calibrated), second = load_safetensors(again);
  int coding = 0;
  for (const auto& [name, tensor] : first.tensors) {
    if (name.find(".coding.") == std::string::npos) continue;
    ++coding;
    EXPECT_EQ(tensor.to_values(), second.tensors.at(name).to_values()) << name;
  }
  EXPECT_GT(coding, 4);

  for (const std::string& model : {int8_path, calibrated}) {
    auto compressed = run({"compress", "--model", model, folder / "images/a.png", "-o", folder / "a.pxae", "--device",
                           "cpu", "--overwrite"});
    ASSERT_EQ(compressed.exit_code, 0) << compressed.describe();
    auto decompressed = run({"decompress", "--model", model, folder / "a.pxae", "-o", folder / "a-decoded.png",
                             "--device", "cpu", "--overwrite"});
    ASSERT_EQ(decompressed.exit_code, 0) << decompressed.describe();
    EXPECT_TRUE(contains(decompressed.out, "96x80")) << decompressed.out;
  }
}

TEST_F(PlexusAeHyperprior, ASpecTheCodecCannotCodeIsNamedBeforeTheFirstStep) {
  auto trained = run({"train", "--data", folder / "images", "--model",
                      testing::test_model("tiny_hyperprior_means.json"), "--patch", "64", "--batch", "1", "--steps",
                      "1", "--device", "cpu", "--threads", "1", "--out", folder / "means"});
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
