// The mean-scale hyperprior codec (CodecModel on a spec whose
// GaussianConditional reads [y_hat, scales, means], y_hat from a
// QuantizeAroundMean): the version-3 file, round trips that give back the
// symbols, means and y_hat = symbol + mean exactly, the integer means
// against the float model's, the stored calibration, corrupt files refused,
// the real rate against eval's estimate, and (on a GPU) files compressed on
// CUDA decoding to the same latents on the CPU, for the tiny spec and the
// bundled mbt2018-mean.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "apps/cli_runner.h"
#include "codec/codec_model_test_support.h"
#include "data/data_test_support.h"
#include "image_evaluation.h"
#include "plexus/builtin_layers.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/codec/codec_model.h"
#include "plexus/codec/gaussian_tables.h"
#include "plexus/error.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus::ae {
namespace {

using testing::contains;
using testing::error_or_none;
using testing::get32;
using testing::put32;
using testing::reseal;

const Registry registry = builtin_registry();

ModelSpec tiny_spec() { return ModelSpec::from_file(std::string(PLEXUS_TEST_MODELS) + "/tiny_mean_scale.json"); }

ModelSpec bundled_spec() {
  return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/mbt2018-mean.json");
}

TensorFile tiny_weights(std::uint64_t seed) {
  return testing::untrained_weights(tiny_spec(), registry, seed,
                                    {{"g_a1.weight", 30}, {"h_a1.weight", 4}, {"h_s1.weight", 6}});
}

ImageEvaluation evaluate(const ModelSpec& spec, const TensorFile& file, const data::Image& image, int stride,
                         std::map<std::string, Tensor>* blobs = nullptr) {
  return testing::evaluate_with_weights(spec, registry, file, image, stride, blobs);
}

class MeanScaleCodec : public ::testing::Test {
 protected:
  MeanScaleCodec() : file(tiny_weights(3)), model(tiny_spec(), file, registry, Device::cpu(), "tiny-ms.safetensors") {}
  TensorFile file;
  CodecModel model;
};

TEST_F(MeanScaleCodec, IsAMeanScaleHyperpriorPaddedToTheHyperLatentsStride) {
  EXPECT_EQ(model.kind(), ModelKind::mean_scale_hyperprior);
  EXPECT_EQ(model.stride(), 8);
  EXPECT_EQ(model.channels(), 8);
  EXPECT_EQ(model.tables().channels(), 6);
  EXPECT_TRUE(model.integer_network().has_means());
  EXPECT_EQ(why_not_codable(tiny_spec(), registry), std::nullopt);
  EXPECT_EQ(why_not_codable(bundled_spec(), registry), std::nullopt);
}

TEST_F(MeanScaleCodec, RoundTripGivesTheSymbolsMeansAndLatentBack) {
  for (const auto& [width, height] : std::vector<std::pair<int, int>>{{37, 29}, {8, 8}, {1, 1}, {64, 40}}) {
    const std::string size = std::to_string(width) + "x" + std::to_string(height);
    const data::Image image = testing::position_image(width, height);
    const CodecModel::Latents encoded = model.encode_latents(image);
    const std::vector<std::uint8_t> bytes = model.compress(image);
    const CodecModel::Latents decoded = model.decode_latents(bytes.data(), bytes.size());
    EXPECT_EQ(decoded.hyper_latent.to_values(), encoded.hyper_latent.to_values()) << size;
    EXPECT_EQ(decoded.indices, encoded.indices) << size;
    EXPECT_EQ(decoded.means, encoded.means) << size;
    EXPECT_EQ(decoded.symbols, encoded.symbols) << size;
    EXPECT_EQ(decoded.latent.to_values(), encoded.latent.to_values()) << size;
    // y_hat = symbol + mean, the symbol round(y - mean): within half a step of y.
    const std::vector<double> y = model.analyse(image).latent.to_values();
    const std::vector<double> y_hat = decoded.latent.to_values();
    ASSERT_EQ(y.size(), decoded.symbols.size());
    for (std::size_t n = 0; n < y.size(); ++n) {
      const double mean = std::ldexp(static_cast<double>(decoded.means[n]), -16);
      ASSERT_EQ(y_hat[n], static_cast<float>(decoded.symbols[n] + mean)) << size << " element " << n;
      ASSERT_LE(std::abs(y_hat[n] - y[n]), 0.5 + 1e-5) << size << " element " << n;
    }
  }
}

TEST_F(MeanScaleCodec, MeansFollowTheFloatModelAndTheReconstructionEval) {
  const data::Image image = testing::position_image(64, 40);
  std::map<std::string, Tensor> blobs{{"means", {}}, {"y_hat", {}}};
  const ImageEvaluation eval = evaluate(tiny_spec(), file, image, model.stride(), &blobs);
  const CodecModel::Latents latents = model.encode_latents(image);
  const std::vector<double> float_means = blobs["means"].to_values();
  ASSERT_EQ(float_means.size(), latents.means.size());
  double largest = 0, worst = 0;
  for (double m : float_means) largest = std::max(largest, std::abs(m));
  for (std::size_t n = 0; n < float_means.size(); ++n)
    worst = std::max(worst, std::abs(std::ldexp(static_cast<double>(latents.means[n]), -16) - float_means[n]));
  EXPECT_GT(largest, 0.5) << "means that matter";
  EXPECT_LT(worst, 2e-3 * largest + 1e-4);
  // y_hat equals eval's but where y - mean lies within that error of a half-integer.
  const std::vector<double> eval_y_hat = blobs["y_hat"].to_values(), y_hat = latents.latent.to_values();
  std::size_t same = 0;
  for (std::size_t n = 0; n < y_hat.size(); ++n) same += std::abs(y_hat[n] - eval_y_hat[n]) < 0.01;
  EXPECT_GE(same, y_hat.size() * 99 / 100);
  const std::vector<std::uint8_t> bytes = model.compress(image);
  EXPECT_GT(data::psnr(model.decompress(bytes.data(), bytes.size()), eval.reconstruction), 40.0);
}

TEST_F(MeanScaleCodec, HeaderIsVersionThreeWithKindThree) {
  model.set_format_version(3);
  const std::vector<std::uint8_t> bytes = model.compress(testing::position_image(37, 29));
  ASSERT_GE(bytes.size(), kHyperpriorOverheadBytes);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "PXAE");
  EXPECT_EQ(bytes[4] | bytes[5] << 8, 3);
  EXPECT_EQ(get32(bytes, 24), 8u);
  EXPECT_EQ(get32(bytes, 28), 8u);
  EXPECT_EQ(get32(bytes, 32), 10u);
  EXPECT_EQ(get32(bytes, 36), 3u);  // kind: mean-scale hyperprior
  EXPECT_EQ(get32(bytes, 40), 6u);
  EXPECT_EQ(get32(bytes, 44), 4u);
  EXPECT_EQ(get32(bytes, 48), 5u);
  EXPECT_EQ(get32(bytes, 52), bytes.size() - kHyperpriorOverheadBytes);
  EXPECT_EQ(model.compress(testing::position_image(37, 29)), bytes) << "compressing twice";
}

TEST_F(MeanScaleCodec, TheStoredCalibrationIsTheOneComputedOnLoad) {
  TensorFile stored = file;
  ASSERT_TRUE(add_coding_tables(stored, tiny_spec(), registry));
  // Rescale nodes: the LeakyReLU after h_s0 only (the split reads h_s1's accumulators).
  EXPECT_TRUE(stored.tensors.count("gaussian_conditional.coding.activation_max0"));
  EXPECT_FALSE(stored.tensors.count("gaussian_conditional.coding.activation_max1"));
  CodecModel from_stored(tiny_spec(), stored, registry, Device::cpu(), "stored");
  EXPECT_FALSE(from_stored.computed_tables());
  EXPECT_EQ(from_stored.fingerprint(), model.fingerprint());
  TensorFile broken = stored;
  broken.tensors["gaussian_conditional.coding.activation_max0"] = Tensor::from_values({1, 2}, {2}, DType::f64);
  EXPECT_TRUE(contains(error_or_none([&] { CodecModel(tiny_spec(), broken, registry, Device::cpu(), "broken"); }),
                       "activation_max0"));
}

TEST_F(MeanScaleCodec, VersionFiveNamesItsCodecSectionAndCodesTwoStreams) {
  const std::vector<std::uint8_t> bytes = model.compress(testing::position_image(37, 29));
  EXPECT_EQ(bytes[4] | bytes[5] << 8, 5);
  const std::vector<testing::SectionView> sections = testing::sections_of(bytes);
  ASSERT_EQ(sections.size(), 2u);
  EXPECT_EQ(sections[0].channels, 6u);
  EXPECT_EQ(sections[1].channels, 8u);
  EXPECT_EQ(model.codec_section(), nlohmann::json::parse(R"({"type": "hyperprior",
      "z": {"type": "factorized", "entropy_model": "hyper_entropy_model"},
      "y": {"type": "gaussian", "conditional": "gaussian_conditional", "distribution": "mean_scale",
            "quantizer": "quantizer"}})"));
  model.set_format_version(3);
  const std::vector<std::uint8_t> version3 = model.compress(testing::position_image(37, 29));
  const CodecModel::Latents v5 = model.decode_latents(bytes.data(), bytes.size());
  const CodecModel::Latents v3 = model.decode_latents(version3.data(), version3.size());
  EXPECT_EQ(v5.latent.to_values(), v3.latent.to_values());
  EXPECT_EQ(v5.symbols, v3.symbols);
  EXPECT_EQ(v5.means, v3.means);
  // The same spec with the section written out: the same codec fingerprint, so the file decodes.
  ModelSpec declared = tiny_spec();
  declared.codec = model.codec_section();
  CodecModel explicit_section(declared, file, registry, Device::cpu(), "declared");
  EXPECT_EQ(explicit_section.codec_fingerprint(), model.codec_fingerprint());
  // (the spec JSON is in the model fingerprint, which now differs)
  EXPECT_NE(explicit_section.fingerprint(), model.fingerprint());
}

TEST_F(MeanScaleCodec, CorruptAndForeignFilesAreRefusedSayingWhy) {
  model.set_format_version(3);
  const std::vector<std::uint8_t> bytes = model.compress(testing::position_image(37, 29));
  auto decode_error = [&](const std::vector<std::uint8_t>& b) {
    return error_or_none([&] { model.decompress(b.data(), b.size()); });
  };
  EXPECT_EQ(decode_error(bytes), "no error");
  EXPECT_TRUE(contains(decode_error({bytes.begin(), bytes.end() - 3}), "truncated"));
  std::vector<std::uint8_t> changed = bytes;
  changed[4] = 2;  // a version-2 file must hold kind 2
  reseal(changed);
  EXPECT_TRUE(contains(decode_error(changed), "model kind 3 in a format-version-2 file")) << decode_error(changed);
  put32(changed, 36, 2);  // a scale-hyperprior file given to this mean-scale model
  reseal(changed);
  EXPECT_TRUE(contains(decode_error(changed), "a scale-hyperprior file (format version 2), but 'tiny-ms.safetensors' "
                                              "is a mean-scale-hyperprior model"))
      << decode_error(changed);
  changed = bytes;
  put32(changed, 44, 5);
  reseal(changed);
  EXPECT_TRUE(contains(decode_error(changed), "hyper-latent shape [6, 5, 5]")) << decode_error(changed);
  // Another model's file: named by fingerprint, never decoded.
  CodecModel other(tiny_spec(), tiny_weights(4), registry, Device::cpu(), "other.safetensors");
  const std::vector<std::uint8_t> foreign = other.compress(testing::position_image(37, 29));
  EXPECT_TRUE(contains(decode_error(foreign), "fingerprint")) << decode_error(foreign);
  // This file to the scale hyperprior of tiny_hyperprior.json.
  const ModelSpec scale_only = ModelSpec::from_file(std::string(PLEXUS_TEST_MODELS) + "/tiny_hyperprior.json");
  CodecModel hyperprior(scale_only, testing::untrained_weights(scale_only, registry, 3, {}), registry, Device::cpu(),
                        "hp.safetensors");
  hyperprior.set_format_version(2);
  EXPECT_TRUE(contains(error_or_none([&] { hyperprior.decompress(bytes.data(), bytes.size()); }),
                       "a mean-scale-hyperprior file (format version 3), but 'hp.safetensors' is a "
                       "scale-hyperprior model"));
  const testing::BitFlipOutcome flips =
      testing::flip_coded_stream_bits(bytes, kHyperpriorHeaderBytes, 7, 3,
                                      [&](const std::vector<std::uint8_t>& flipped) { return decode_error(flipped); });
  EXPECT_GT(flips.rejected, flips.total * 8 / 10) << flips.rejected << " of " << flips.total;
}

TEST(MeanScaleCodecStraightThrough, TheSynthesisReadingTheRoundedOutputIsCoded) {
  // "synthesis": "straight_through": the synthesis reads the quantiser's second
  // output, which in eval mode holds the same values as y_hat.
  ModelSpec spec = tiny_spec();
  for (NodeSpec& node : spec.nodes) {
    if (node.name == "quantizer") {
      node.outputs = {"y_hat", "y_rounded"};
      node.params["synthesis"] = "straight_through";
    }
    if (node.name == "g_s0") node.inputs = {"y_rounded"};
  }
  EXPECT_EQ(why_not_codable(spec, registry), std::nullopt);
  const TensorFile file = tiny_weights(5);
  CodecModel model(spec, file, registry, Device::cpu(), "st");
  const data::Image image = testing::position_image(37, 29);
  const std::vector<std::uint8_t> bytes = model.compress(image);
  EXPECT_EQ(model.decode_latents(bytes.data(), bytes.size()).symbols, model.encode_latents(image).symbols);
  const ImageEvaluation eval = evaluate(spec, file, image, model.stride());
  EXPECT_GT(data::psnr(model.decompress(bytes.data(), bytes.size()), eval.reconstruction), 40.0);
}

// The real files against eval's estimate on the bundled Kodak crops, with
// the tiny model trained on the bundled training images (train_for_rate_test).
TEST(MeanScaleCodecRate, FilesAreWithinAFewPercentOfTheEstimate) {
  testing::ScratchFolder folder{"mean-scale-rate"};
  testing::expect_files_near_the_estimate(
      tiny_spec(), registry, testing::train_for_rate_test("tiny_mean_scale.json", folder.path()), 0.05, 0.05);
}

TEST(MeanScaleCodecCrossDevice, CudaFilesDecodeToTheSameLatentsOnTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::vector<data::Image> images;
  for (const char* name : {"kodim04.png", "kodim14.png"})
    images.push_back(data::read_image(std::string(PLEXUS_SOURCE_DIR) + "/data/eval-sample/" + name));
  images.push_back(testing::position_image(37, 29));
  testing::expect_cross_device(tiny_spec(), tiny_weights(11), registry, images);
}

TEST(MeanScaleCodecCrossDevice, TheBundledMbt2018MeanCompressedOnCudaDecodesOnTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const ModelSpec spec = bundled_spec();
  const TensorFile file =
      testing::untrained_weights(spec, registry, 13, {{"g_a3.weight", 20}, {"h_a2.weight", 3}, {"h_s2.weight", 3}});
  const data::Image crop = data::read_image(std::string(PLEXUS_SOURCE_DIR) + "/data/eval-sample/kodim23.png");
  testing::expect_cross_device(spec, file, registry, {crop, testing::position_image(200, 130)});
}

}  // namespace
}  // namespace plexus::ae
