// The scale-hyperprior codec (CodecModel on a spec with a GaussianConditional):
// round trips that give exactly the eval reconstruction, the version-2
// header, the stored calibration, integer indices against the float model's
// scales, corrupt files refused, specs it cannot code named without weights
// (why_not_codable) as CodecModel names them, the real rate against the estimate, and
// (on a GPU) files compressed on CUDA decoding to the same latents on the CPU.
// The mean-scale hyperprior codec (a GaussianConditional reading [y_hat,
// scales, means], y_hat from a QuantizeAroundMean): the version-3 file, round
// trips that give back the symbols, means and y_hat = symbol + mean exactly,
// the integer means against the float model's, the stored calibration,
// corrupt files refused, the real rate against eval's estimate, and (on a
// GPU) files compressed on CUDA decoding to the same latents on the CPU, for
// the tiny spec and the bundled mbt2018-mean.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <set>

#include "apps/cli_runner.h"
#include "codec/codec_model_test_support.h"
#include "data/data_test_support.h"
#include "image_evaluation.h"
#include "plexus/builtin_layers.h"
#include "plexus/checksum.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/codec/codec_model.h"
#include "plexus/codec/gaussian_tables.h"
#include "plexus/error.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus::codec {
namespace {

const Registry registry = builtin_registry();

ModelSpec tiny_spec() { return ModelSpec::from_file(std::string(PLEXUS_TEST_MODELS) + "/tiny_hyperprior.json"); }

ModelSpec bundled_spec() {
  return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/bmshj2018-hyperprior.json");
}

TensorFile weights(const ModelSpec& spec, std::uint64_t seed, const std::map<std::string, double>& scaled) {
  return testing::untrained_weights(spec, registry, seed, scaled);
}

TensorFile tiny_weights(std::uint64_t seed) {
  return weights(tiny_spec(), seed, {{"g_a1.weight", 30}, {"h_a1.weight", 4}, {"h_s1.weight", 6}});
}

using testing::code_bits;
using testing::contains;
using testing::error_or_none;
using testing::get32;
using testing::put32;
using testing::reseal;

// The whole model as eval runs it (rounded latents), with the file's weights.
ae::ImageEvaluation evaluate(const ModelSpec& spec, const TensorFile& file, const data::Image& image, int stride,
                             Tensor* scales = nullptr) {
  std::map<std::string, Tensor> blobs{{"scales", Tensor()}};
  ae::ImageEvaluation result = testing::evaluate_with_weights(spec, registry, file, image, stride, &blobs);
  if (scales) *scales = blobs["scales"];
  return result;
}

class HyperpriorCodec : public ::testing::Test {
 protected:
  HyperpriorCodec() : file(tiny_weights(3)), model(tiny_spec(), file, registry, Device::cpu(), "tiny-hp.safetensors") {}
  TensorFile file;
  CodecModel model;
};

TEST_F(HyperpriorCodec, IsAScaleHyperpriorPaddedToTheHyperLatentsStride) {
  EXPECT_EQ(model.kind(), ModelKind::hyperprior);
  EXPECT_EQ(model.stride(), 8);
  EXPECT_EQ(model.channels(), 8);
  EXPECT_EQ(model.tables().channels(), 6);  // the hyper-latent's
  EXPECT_TRUE(model.computed_tables());
  EXPECT_EQ(model.scale_table(), codec::log_scale_table());
}

TEST_F(HyperpriorCodec, RoundTripGivesTheLatentsAndTheEvalReconstruction) {
  for (const auto& [width, height] : std::vector<std::pair<int, int>>{{37, 29}, {8, 8}, {1, 1}, {64, 40}}) {
    const data::Image image = testing::position_image(width, height);
    const CodecModel::Latents encoded = model.encode_latents(image);
    const std::vector<std::uint8_t> bytes = model.compress(image);
    const CodecModel::Latents decoded = model.decode_latents(bytes.data(), bytes.size());
    EXPECT_EQ(decoded.hyper_latent.to_values(), encoded.hyper_latent.to_values()) << width << "x" << height;
    EXPECT_EQ(decoded.indices, encoded.indices) << width << "x" << height;
    EXPECT_EQ(decoded.latent.to_values(), encoded.latent.to_values()) << width << "x" << height;
    const data::Image reconstruction = model.decompress(bytes.data(), bytes.size());
    const ae::ImageEvaluation eval = evaluate(tiny_spec(), file, image, model.stride());
    EXPECT_EQ(reconstruction.pixels, eval.reconstruction.pixels) << width << "x" << height;
  }
  // Latents that span many integers and scales that use much of the table.
  const CodecModel::Latents latents = model.encode_latents(testing::position_image(64, 40));
  double largest = 0;
  for (double v : latents.latent.to_values()) largest = std::max(largest, std::abs(v));
  EXPECT_GT(largest, 3);
  std::set<std::int32_t> used(latents.indices.begin(), latents.indices.end());
  EXPECT_GT(used.size(), 8u);
}

TEST_F(HyperpriorCodec, HeaderIsVersionTwoWithTheKindAndTheHyperLatentShape) {
  model.set_format_version(2);
  const std::vector<std::uint8_t> bytes = model.compress(testing::position_image(37, 29));
  ASSERT_GE(bytes.size(), kHyperpriorOverheadBytes);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "PXAE");
  EXPECT_EQ(bytes[4] | bytes[5] << 8, 2);
  EXPECT_EQ(get32(bytes, 16), 37u);
  EXPECT_EQ(get32(bytes, 20), 29u);
  EXPECT_EQ(get32(bytes, 24), 8u);   // C
  EXPECT_EQ(get32(bytes, 28), 8u);   // h = 2 ceil(29 / 8)
  EXPECT_EQ(get32(bytes, 32), 10u);  // w = 2 ceil(37 / 8)
  EXPECT_EQ(get32(bytes, 36), 2u);   // kind: scale hyperprior
  EXPECT_EQ(get32(bytes, 40), 6u);   // Cz
  EXPECT_EQ(get32(bytes, 44), 4u);
  EXPECT_EQ(get32(bytes, 48), 5u);
  EXPECT_EQ(get32(bytes, 52), bytes.size() - kHyperpriorOverheadBytes);
  EXPECT_EQ(model.compress(testing::position_image(37, 29)), bytes) << "compressing twice";
}

TEST_F(HyperpriorCodec, TheStoredCalibrationIsTheOneComputedOnLoad) {
  TensorFile stored = file;
  ASSERT_TRUE(add_coding_tables(stored, tiny_spec(), registry));
  EXPECT_TRUE(stored.tensors.count("gaussian_conditional.coding.scale_table"));
  EXPECT_TRUE(stored.tensors.count("gaussian_conditional.coding.activation_max0"));
  EXPECT_FALSE(stored.tensors.count("gaussian_conditional.coding.activation_max1")) << "one hidden layer";
  CodecModel from_stored(tiny_spec(), stored, registry, Device::cpu(), "stored");
  EXPECT_FALSE(from_stored.computed_tables());
  EXPECT_EQ(from_stored.fingerprint(), model.fingerprint());

  // Calibrated on images instead: another integer network, another fingerprint, still a codec.
  TensorFile on_images = file;
  ASSERT_TRUE(add_coding_tables(on_images, tiny_spec(), registry,
                                {testing::position_image(64, 48), testing::position_image(40, 40)}, true));
  CodecModel calibrated(tiny_spec(), on_images, registry, Device::cpu(), "calibrated");
  EXPECT_NE(calibrated.fingerprint(), model.fingerprint());
  const data::Image image = testing::position_image(37, 29);
  const std::vector<std::uint8_t> bytes = calibrated.compress(image);
  EXPECT_EQ(calibrated.decode_latents(bytes.data(), bytes.size()).indices, calibrated.encode_latents(image).indices);
  EXPECT_TRUE(contains(error_or_none([&] { model.decompress(bytes.data(), bytes.size()); }), "fingerprint"));

  // A calibration that does not fit the network is refused on load.
  TensorFile broken = stored;
  broken.tensors["gaussian_conditional.coding.activation_max0"] = Tensor::from_values({1, 2}, {2}, DType::f64);
  EXPECT_TRUE(contains(error_or_none([&] { CodecModel(tiny_spec(), broken, registry, Device::cpu(), "broken"); }),
                       "activation_max0"));
  broken = stored;
  broken.tensors["gaussian_conditional.coding.scale_table"] = Tensor::from_values({1, 0.5}, {2}, DType::f64);
  EXPECT_TRUE(contains(error_or_none([&] { CodecModel(tiny_spec(), broken, registry, Device::cpu(), "broken"); }),
                       "increasing"));
}

// tiny_hyperprior.json with one node changed by `change`.
ModelSpec changed_tiny_spec(const std::string& node, const std::function<void(NodeSpec&)>& change) {
  ModelSpec spec = tiny_spec();
  for (NodeSpec& n : spec.nodes)
    if (n.name == node) change(n);
  return spec;
}

TEST(WhyNotCodable, TheBundledAndTestSpecsCanBeCoded) {
  EXPECT_EQ(why_not_codable(tiny_spec(), registry), std::nullopt);
  EXPECT_EQ(why_not_codable(bundled_spec(), registry), std::nullopt);
  EXPECT_EQ(why_not_codable(ModelSpec::from_file(std::string(PLEXUS_TEST_MODELS) + "/tiny.json"), registry),
            std::nullopt);
}

TEST(WhyNotCodable, MeansWithoutAQuantizerAroundThemAreNamedAsCodecModelRefusesThem) {
  const ModelSpec spec = ModelSpec::from_file(std::string(PLEXUS_TEST_MODELS) + "/tiny_hyperprior_means.json");
  const std::optional<std::string> reason = why_not_codable(spec, registry);
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, "its latent 'y_hat' must be the output of a QuantizeAroundMean node reading [y, 'scales'] (the "
                     "means of GaussianConditional 'gaussian_conditional'), so that the codec can quantise around "
                     "the integer means");
  // The weights are those of tiny_hyperprior.json: a mean input adds none.
  const std::string refused = error_or_none([&] { CodecModel(spec, tiny_weights(3), registry, Device::cpu(), "m"); });
  EXPECT_EQ(refused, spec.source + " cannot be used as a codec: " + *reason);
}

TEST(WhyNotCodable, AnEntropyParameterNodeWithoutIntegerFormIsNamed) {
  const ModelSpec spec = changed_tiny_spec("h_s0_relu", [](NodeSpec& n) { n.type = "Sigmoid"; });
  const std::optional<std::string> reason = why_not_codable(spec, registry);
  ASSERT_TRUE(reason.has_value());
  EXPECT_TRUE(contains(*reason, "the entropy parameters (the nodes from the hyper-latent 'z_hat' to the scales)"))
      << *reason;
  EXPECT_TRUE(contains(*reason, "node 'h_s0_relu' (Sigmoid) has no exact integer form")) << *reason;
  const std::string refused = error_or_none([&] { CodecModel(spec, tiny_weights(3), registry, Device::cpu(), "s"); });
  EXPECT_EQ(refused, "'s': " + *reason);
}

TEST(WhyNotCodable, EntropyParametersThatBreakTheIntegerRulesNameTheNode) {
  // A grouped convolution: the integer networks hold dense kernels only.
  const ModelSpec grouped = changed_tiny_spec("h_s1", [](NodeSpec& n) { n.params["groups"] = 2; });
  EXPECT_TRUE(contains(why_not_codable(grouped, registry).value_or(""),
                       "node 'h_s1' (ConvTranspose2d) has groups or dilation other than 1"))
      << why_not_codable(grouped, registry).value_or("codable");
  // A node reading what the decoder does not have.
  const ModelSpec reads_y = changed_tiny_spec("h_s1", [](NodeSpec& n) { n.inputs = {"y"}; });
  EXPECT_TRUE(contains(why_not_codable(reads_y, registry).value_or(""),
                       "node 'h_s1' (ConvTranspose2d) reads 'y', which the decoder cannot compute from the "
                       "hyper-latent"))
      << why_not_codable(reads_y, registry).value_or("codable");
  // An activation function that does not follow a convolution.
  ModelSpec twice = changed_tiny_spec("h_s1", [](NodeSpec& n) { n.inputs = {"h_s0_act2"}; });
  NodeSpec second;
  second.name = "h_s0_relu2";
  second.type = "ReLU";
  second.inputs = {"h_s0_act"};
  second.outputs = {"h_s0_act2"};
  twice.nodes.insert(twice.nodes.begin() + 11, second);
  EXPECT_TRUE(contains(why_not_codable(twice, registry).value_or(""),
                       "node 'h_s0_relu2' (ReLU) does not read a convolution's output"))
      << why_not_codable(twice, registry).value_or("codable");
  // A LeakyReLU whose slope has no integer form here.
  const ModelSpec slope = changed_tiny_spec("h_s0_relu", [](NodeSpec& n) {
    n.type = "LeakyReLU";
    n.params["negative_slope"] = -0.5;
  });
  EXPECT_TRUE(contains(why_not_codable(slope, registry).value_or(""),
                       "node 'h_s0_relu' (LeakyReLU) has a negative slope of -0.500000 (0 to 1 is needed)"))
      << why_not_codable(slope, registry).value_or("codable");
  // LeakyReLU with a slope in [0, 1] is codable.
  const ModelSpec leaky = changed_tiny_spec("h_s0_relu", [](NodeSpec& n) { n.type = "LeakyReLU"; });
  EXPECT_EQ(why_not_codable(leaky, registry), std::nullopt);
  EXPECT_NO_THROW(CodecModel(leaky, tiny_weights(3), registry, Device::cpu(), "leaky"));
}

TEST(WhyNotCodable, ASecondGaussianConditionalIsRefused) {
  ModelSpec spec = tiny_spec();
  NodeSpec second = spec.nodes.back();
  for (const NodeSpec& n : spec.nodes)
    if (n.name == "gaussian_conditional") second = n;
  second.name = "gaussian_conditional_2";
  second.outputs = {"likelihoods_2"};
  spec.nodes.push_back(second);
  const std::optional<std::string> reason = why_not_codable(spec, registry);
  ASSERT_TRUE(reason.has_value());
  EXPECT_TRUE(contains(*reason, "it has 2 GaussianConditional nodes")) << *reason;
}

// The float model's index: the first table scale >= its f32 "scales" blob.
std::vector<std::int32_t> float_indices(const Tensor& scales, const std::vector<double>& table) {
  std::vector<std::int32_t> indices;
  for (double s : scales.to_values()) {
    std::int32_t index = 0;
    for (std::size_t i = 0; i + 1 < table.size(); ++i) index += s > table[i];
    indices.push_back(index);
  }
  return indices;
}

TEST_F(HyperpriorCodec, IntegerIndicesAgreeWithTheFloatModelsScales) {
  TensorFile calibrated_file = file;
  const std::vector<data::Image> images = {testing::position_image(64, 48), testing::position_image(48, 64)};
  ASSERT_TRUE(add_coding_tables(calibrated_file, tiny_spec(), registry, images, true));
  CodecModel calibrated(tiny_spec(), calibrated_file, registry, Device::cpu(), "calibrated");
  std::size_t agree = 0, total = 0, far = 0;
  for (const data::Image& image : images) {
    Tensor scales;
    evaluate(tiny_spec(), file, image, calibrated.stride(), &scales);
    const std::vector<std::int32_t> expected = float_indices(scales, calibrated.scale_table());
    const std::vector<std::int32_t> got = calibrated.encode_latents(image).indices;
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t n = 0; n < got.size(); ++n) {
      agree += got[n] == expected[n];
      far += std::abs(got[n] - expected[n]) > 1;
    }
    total += got.size();
  }
  std::printf("integer vs float-model index agreement: %zu of %zu (%.4f)\n", agree, total,
              static_cast<double>(agree) / total);
  EXPECT_GE(agree, total * 98 / 100);
  EXPECT_EQ(far, 0u);
}

TEST_F(HyperpriorCodec, VersionFiveCodesTheHyperLatentAndTheLatentInTwoSections) {
  const std::vector<std::uint8_t> bytes = model.compress(testing::position_image(37, 29));
  EXPECT_EQ(bytes[4] | bytes[5] << 8, 5);
  const std::vector<testing::SectionView> sections = testing::sections_of(bytes);
  ASSERT_EQ(sections.size(), 2u);
  for (const testing::SectionView& section : sections) EXPECT_EQ(section.type * 16 + section.flags, 17u);
  EXPECT_EQ(std::vector<std::uint32_t>({sections[0].channels, sections[0].height, sections[0].width}),
            std::vector<std::uint32_t>({6, 4, 5}));  // z
  EXPECT_EQ(std::vector<std::uint32_t>({sections[1].channels, sections[1].height, sections[1].width}),
            std::vector<std::uint32_t>({8, 8, 10}));  // y
  EXPECT_EQ(model.codec_section()["type"], "hyperprior");
  EXPECT_EQ(model.codec_section()["y"]["distribution"], "scale");
  // The same latents as the version-2 file of the same image.
  const CodecModel::Latents v5 = model.decode_latents(bytes.data(), bytes.size());
  model.set_format_version(2);
  const std::vector<std::uint8_t> version2 = model.compress(testing::position_image(37, 29));
  const CodecModel::Latents v2 = model.decode_latents(version2.data(), version2.size());
  EXPECT_EQ(v5.latent.to_values(), v2.latent.to_values());
  EXPECT_EQ(v5.hyper_latent.to_values(), v2.hyper_latent.to_values());
  EXPECT_EQ(v5.indices, v2.indices);
  // A second stream shaped for another image is named.
  std::vector<std::uint8_t> changed = bytes;
  put32(changed, sections[1].payload, 7);
  reseal(changed);
  EXPECT_TRUE(contains(error_or_none([&] { model.decompress(changed.data(), changed.size()); }),
                       "coded stream 1 has shape [7, 8, 10], which does not fit a 37x29 image under this model, which "
                       "needs [8, 8, 10]"));
}

TEST_F(HyperpriorCodec, CorruptAndForeignFilesAreRefusedSayingWhy) {
  model.set_format_version(2);
  const std::vector<std::uint8_t> bytes = model.compress(testing::position_image(37, 29));
  auto decode_error = [&](const std::vector<std::uint8_t>& b) {
    return error_or_none([&] { model.decompress(b.data(), b.size()); });
  };
  EXPECT_TRUE(contains(decode_error({bytes.begin(), bytes.end() - 5}), "truncated"))
      << decode_error({bytes.begin(), bytes.end() - 5});
  std::vector<std::uint8_t> changed = bytes;
  put32(changed, 44, 5);
  reseal(changed);
  EXPECT_TRUE(contains(decode_error(changed), "hyper-latent shape [6, 5, 5] does not fit a 37x29 image under this "
                                              "model, which needs [6, 4, 5]"))
      << decode_error(changed);
  changed = bytes;
  put32(changed, 36, 1);
  reseal(changed);
  EXPECT_TRUE(contains(decode_error(changed), "model kind 1 in a format-version-2 file")) << decode_error(changed);

  // A factorized model's file given to this model, and this file to a factorized model.
  const ModelSpec factorized = ModelSpec::from_file(std::string(PLEXUS_TEST_MODELS) + "/tiny.json");
  Net net(factorized, registry, {{kImage, Shape{1, 3, 4, 4}}}, DType::f32, Device::cpu(), 1);
  TensorFile factorized_file;
  for (const NamedParameter& named : net.parameters())
    factorized_file.tensors[named.name] = named.parameter->value.clone();
  CodecModel other(factorized, factorized_file, registry, Device::cpu(), "tiny.safetensors");
  // Version 5 names the codec section: a factorized tree is not this hyperprior's.
  const std::vector<std::uint8_t> version5 = other.compress(testing::position_image(21, 13));
  EXPECT_TRUE(contains(decode_error(version5),
                       "coded with the codec section of fingerprint " + fingerprint_text(other.codec_fingerprint()) +
                           ", but 'tiny-hp.safetensors' codes with " + fingerprint_text(model.codec_fingerprint())))
      << decode_error(version5);
  other.set_format_version(1);
  const std::vector<std::uint8_t> version1 = other.compress(testing::position_image(21, 13));
  EXPECT_TRUE(contains(decode_error(version1), "a factorized-prior file (format version 1), but 'tiny-hp.safetensors' "
                                               "is a scale-hyperprior model"))
      << decode_error(version1);
  const std::string refused = error_or_none([&] { other.decompress(bytes.data(), bytes.size()); });
  EXPECT_TRUE(contains(refused, "a scale-hyperprior file (format version 2), but 'tiny.safetensors' is a "
                                "factorized-prior model"))
      << refused;

  // Bit flips behind a valid checksum: refused by the stream decoder or decoded, never a crash.
  const testing::BitFlipOutcome flips =
      testing::flip_coded_stream_bits(bytes, kHyperpriorHeaderBytes, 7, 3,
                                      [&](const std::vector<std::uint8_t>& flipped) { return decode_error(flipped); });
  EXPECT_GT(flips.rejected, flips.total * 8 / 10) << flips.rejected << " of " << flips.total;
}

TEST_F(HyperpriorCodec, LatentsOutsideEveryTableStillRoundTrip) {
  // A latent far larger than its scales (h_s zeroed: every index 0, the
  // table of scale 0.11, [-1, 1]) and a huge hyper-latent: most values escape.
  TensorFile extreme =
      weights(tiny_spec(), 5, {{"g_a1.weight", 3000}, {"h_a1.weight", 3000}, {"h_s1.weight", 0}, {"h_s1.bias", 0}});
  CodecModel wild(tiny_spec(), extreme, registry, Device::cpu(), "extreme");
  const data::Image image = testing::position_image(33, 17);
  const CodecModel::Latents encoded = wild.encode_latents(image);
  const std::vector<std::uint8_t> bytes = wild.compress(image);
  const CodecModel::Latents decoded = wild.decode_latents(bytes.data(), bytes.size());
  EXPECT_EQ(decoded.latent.to_values(), encoded.latent.to_values());
  EXPECT_EQ(decoded.hyper_latent.to_values(), encoded.hyper_latent.to_values());
  double largest = 0;
  for (double v : encoded.latent.to_values()) largest = std::max(largest, std::abs(v));
  EXPECT_GT(largest, 100) << "the latent should reach far beyond its tables";
  for (std::int32_t index : encoded.indices) ASSERT_EQ(index, 0);
}

// The real files against eval's estimate (both latents' -log2 likelihoods)
// at the coder's resolution (testing::EstimateBits: the elements less likely
// than 2^-16 counted at 16 bits) on the bundled Kodak images, with the tiny
// model trained on the bundled training images (testing::train_for_rate_test).
TEST(HyperpriorCodecRate, FilesAreWithinAFewPercentOfTheEstimate) {
  testing::ScratchFolder folder{"hyperprior-rate"};
  const std::string source = PLEXUS_SOURCE_DIR;
  const std::string path = testing::train_for_rate_test("tiny_hyperprior.json", folder.path());
  auto model = CodecModel::from_file(path, registry, Device::cpu());
  EXPECT_FALSE(model->computed_tables()) << "train stores the tables and the calibration";
  const TensorFile file = load_safetensors(path);
  const codec::GaussianTables tables = codec::build_gaussian_tables(model->scale_table());
  double integer_bits = 0, float_bits = 0;
  for (const char* name : {"kodim04.png", "kodim14.png", "kodim23.png"}) {
    const data::Image image = data::read_image(source + "/data/eval-sample/" + name);
    const std::vector<std::uint8_t> bytes = model->compress(image);
    std::map<std::string, Tensor> blobs = testing::likelihood_blobs(tiny_spec());
    const ae::ImageEvaluation eval =
        testing::evaluate_with_weights(tiny_spec(), registry, file, image, model->stride(), &blobs);
    testing::expect_file_near_the_estimate(name, bytes.size(), image, eval, testing::estimate_bits(tiny_spec(), blobs),
                                           0.05);
    const data::Image decoded = model->decompress(bytes.data(), bytes.size());
    EXPECT_EQ(decoded.pixels, eval.reconstruction.pixels) << name;
    // The integer path's own cost: y coded with the integer indices against
    // y coded with the indices of the float model's scales.
    Tensor scales;
    evaluate(tiny_spec(), file, image, model->stride(), &scales);
    const std::vector<std::int32_t> float_index = float_indices(scales, model->scale_table());
    const CodecModel::Latents latents = model->encode_latents(image);
    const std::vector<double> y = latents.latent.to_values();
    ASSERT_EQ(float_index.size(), y.size());
    for (std::size_t n = 0; n < y.size(); ++n) {
      integer_bits += code_bits(static_cast<std::int32_t>(y[n]), tables.tables[latents.indices[n]]);
      float_bits += code_bits(static_cast<std::int32_t>(y[n]), tables.tables[float_index[n]]);
    }
  }
  std::printf("y coded with the integer indices: %.0f bits; with the float model's: %.0f bits (%+.3f%%)\n",
              integer_bits, float_bits, 100 * (integer_bits / float_bits - 1));
  EXPECT_LT(integer_bits, 1.005 * float_bits);
}

void expect_cross_device(const ModelSpec& spec, const TensorFile& file, const std::vector<data::Image>& images) {
  testing::expect_cross_device(spec, file, registry, images);
}

TEST(HyperpriorCodecCrossDevice, CudaFilesDecodeToTheSameLatentsOnTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::vector<data::Image> images = testing::cross_device_images();
  expect_cross_device(tiny_spec(), tiny_weights(11), images);
}

TEST(HyperpriorCodecCrossDevice, TheBundledSpecCompressedOnCudaDecodesOnTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  // bmshj2018-hyperprior, untrained, its analysis scaled so y and z spread.
  const ModelSpec spec = bundled_spec();
  const TensorFile file = weights(spec, 13, {{"g_a3.weight", 20}, {"h_a2.weight", 3}, {"h_s2.weight", 3}});
  data::Image crop = data::read_image(std::string(PLEXUS_SOURCE_DIR) + "/data/eval-sample/kodim23.png");
  expect_cross_device(spec, file, {crop, testing::position_image(200, 130)});
}

}  // namespace
}  // namespace plexus::codec

namespace plexus::codec {
namespace {
// The mean-scale hyperprior, its helpers apart from the scale hyperprior's.
namespace mean_scale {

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

ae::ImageEvaluation evaluate(const ModelSpec& spec, const TensorFile& file, const data::Image& image, int stride,
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
  const ae::ImageEvaluation eval = evaluate(tiny_spec(), file, image, model.stride(), &blobs);
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
  const ae::ImageEvaluation eval = evaluate(spec, file, image, model.stride());
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
  std::vector<data::Image> images = testing::cross_device_images();
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

}  // namespace mean_scale
}  // namespace
}  // namespace plexus::codec
