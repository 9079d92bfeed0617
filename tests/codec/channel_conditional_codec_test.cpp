// The channel-conditional codec (CodecModel on a spec whose latent is a
// Concat of slices, each from its own QuantizeAroundMean, with latent
// residual prediction): the version-4 file, round trips that give back the
// symbols, means and decoded latent exactly, the slice-by-slice dependence
// (a slice's parameters read the slices before it and no other), the
// integer decoded latent against the float model's, the stored calibration
// and tanh table, corrupt and foreign files refused, the real rate against
// eval's estimate, and (on a GPU) files compressed on CUDA decoding to the
// same latents on the CPU, for the tiny spec and the bundled minnen2020-channel.
#include <gtest/gtest.h>

#include <functional>

#include <cmath>
#include <cstdlib>
#include <random>

#include "apps/cli_runner.h"
#include "codec/codec_model_test_support.h"
#include "data/data_test_support.h"
#include "image_evaluation.h"
#include "plexus/builtin_layers.h"
#include "plexus/codec/codec_model.h"
#include "plexus/error.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus::codec {
namespace {

using testing::contains;
using testing::error_or_none;
using testing::get32;
using testing::put32;
using testing::reseal;

const Registry registry = builtin_registry();

ModelSpec tiny_spec() { return ModelSpec::from_file(std::string(PLEXUS_TEST_MODELS) + "/tiny_channel.json"); }

ModelSpec bundled_spec() {
  return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/minnen2020-channel.json");
}

// Weights scaled so that the latent spans many integers, the means matter
// and the LRP's tanh is neither flat nor saturated.
TensorFile tiny_weights(std::uint64_t seed) {
  return testing::untrained_weights(tiny_spec(), registry, seed,
                                    {{"g_a1.weight", 30},
                                     {"h_a1.weight", 4},
                                     {"h_s_mean1.weight", 6},
                                     {"h_s_scale1.weight", 6},
                                     {"slice0_mean1.weight", 4},
                                     {"slice1_mean1.weight", 4},
                                     {"slice2_mean1.weight", 4}});
}

ae::ImageEvaluation evaluate(const ModelSpec& spec, const TensorFile& file, const data::Image& image, int stride,
                             std::map<std::string, Tensor>* blobs = nullptr) {
  return testing::evaluate_with_weights(spec, registry, file, image, stride, blobs);
}

class ChannelConditionalCodec : public ::testing::Test {
 protected:
  ChannelConditionalCodec()
      : file(tiny_weights(3)), model(tiny_spec(), file, registry, Device::cpu(), "tiny-cc.safetensors") {}
  TensorFile file;
  CodecModel model;
};

TEST_F(ChannelConditionalCodec, IsCodedInItsUnevenSlices) {
  EXPECT_EQ(model.kind(), ModelKind::channel_conditional);
  EXPECT_EQ(model.stride(), 8);
  EXPECT_EQ(model.channels(), 8);
  EXPECT_EQ(model.integer_network().groups(), (std::vector<std::int32_t>{2, 2, 4}));
  EXPECT_GE(model.integer_network().decoded, 0);
  EXPECT_EQ(why_not_codable(tiny_spec(), registry), std::nullopt);
  EXPECT_EQ(why_not_codable(bundled_spec(), registry), std::nullopt);
}

TEST_F(ChannelConditionalCodec, RoundTripGivesTheSymbolsMeansAndDecodedLatentBack) {
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
    // symbol = round(y - mean) and the decoded latent = symbol + mean + 0.5 tanh(.).
    const std::vector<double> y = model.analyse(image).latent.to_values();
    const std::vector<double> y_hat = decoded.latent.to_values();
    ASSERT_EQ(y.size(), decoded.symbols.size());
    for (std::size_t n = 0; n < y.size(); ++n) {
      const double rounded = decoded.symbols[n] + std::ldexp(static_cast<double>(decoded.means[n]), -16);
      ASSERT_LE(std::abs(rounded - y[n]), 0.5 + 1e-5) << size << " element " << n;
      ASSERT_LE(std::abs(y_hat[n] - rounded), 0.5 + 1e-5) << size << " element " << n;
    }
  }
}

TEST_F(ChannelConditionalCodec, EachSliceReadsTheSlicesBeforeItAndNoOther) {
  codec::IntegerNetworkRunner runner(model.integer_network(), Device::cpu());
  const std::vector<std::int32_t> z(6 * 3 * 2, 1);
  const std::int64_t plane = 6 * 4;  // the latent of a 3x2 hyper-latent (2 latent positions per hyper-latent one)
  auto slice_outputs = [&](std::int64_t first_slice_value) {
    runner.start(z, 3, 2);
    std::vector<codec::IntegerOutputs> outputs{runner.outputs(0)};
    runner.set_input(0, std::vector<std::int64_t>(2 * plane, first_slice_value << 16));
    outputs.push_back(runner.outputs(1));
    runner.set_input(1, std::vector<std::int64_t>(2 * plane, 0));
    outputs.push_back(runner.outputs(2));
    return outputs;
  };
  const auto a = slice_outputs(0), b = slice_outputs(5);
  EXPECT_EQ(a[0].indices, b[0].indices) << "slice 0 reads only the hyper-latent";
  EXPECT_EQ(a[0].means, b[0].means);
  EXPECT_NE(a[1].means, b[1].means) << "slice 1 reads slice 0";
  EXPECT_NE(a[2].means, b[2].means) << "slice 2 reads slice 0";
  runner.start(z, 3, 2);
  EXPECT_TRUE(contains(error_or_none([&] { runner.outputs(1); }), "needs latent group 0, which is not decoded yet"));
}

TEST_F(ChannelConditionalCodec, TheDecodedLatentFollowsTheFloatModelAndTheReconstructionEval) {
  const data::Image image = testing::position_image(64, 40);
  std::map<std::string, Tensor> blobs{{"means", {}}, {"y_decoded", {}}};
  const ae::ImageEvaluation eval = evaluate(tiny_spec(), file, image, model.stride(), &blobs);
  const CodecModel::Latents latents = model.encode_latents(image);
  const std::vector<double> float_decoded = blobs["y_decoded"].to_values(), decoded = latents.latent.to_values();
  ASSERT_EQ(float_decoded.size(), decoded.size());
  // Equal within the integer network's error but where a rounding of y - mean flipped.
  std::size_t same = 0;
  for (std::size_t n = 0; n < decoded.size(); ++n) same += std::abs(decoded[n] - float_decoded[n]) < 0.02;
  EXPECT_GE(same, decoded.size() * 97 / 100);
  double largest = 0, lrp = 0;
  for (std::size_t n = 0; n < decoded.size(); ++n) {
    largest = std::max(largest, std::abs(decoded[n]));
    lrp = std::max(lrp, std::abs(decoded[n] - (latents.symbols[n] + std::ldexp(double(latents.means[n]), -16))));
  }
  EXPECT_GT(largest, 2.0) << "a latent that spans integers";
  EXPECT_GT(lrp, 0.05) << "a residual prediction that matters";
  const std::vector<std::uint8_t> bytes = model.compress(image);
  EXPECT_GT(data::psnr(model.decompress(bytes.data(), bytes.size()), eval.reconstruction), 35.0);
}

TEST_F(ChannelConditionalCodec, HeaderIsVersionFourWithKindFour) {
  model.set_format_version(4);
  const std::vector<std::uint8_t> bytes = model.compress(testing::position_image(37, 29));
  ASSERT_GE(bytes.size(), kHyperpriorOverheadBytes);
  EXPECT_EQ(bytes[4] | bytes[5] << 8, 4);
  EXPECT_EQ(get32(bytes, 24), 8u);
  EXPECT_EQ(get32(bytes, 36), 4u);  // kind: channel-conditional
  EXPECT_EQ(get32(bytes, 40), 6u);
  EXPECT_EQ(get32(bytes, 52), bytes.size() - kHyperpriorOverheadBytes);
  EXPECT_EQ(model.compress(testing::position_image(37, 29)), bytes) << "compressing twice";
}

TEST_F(ChannelConditionalCodec, TheStoredCalibrationAndTanhTableAreTheOnesComputedOnLoad) {
  TensorFile stored = file;
  ASSERT_TRUE(add_coding_tables(stored, tiny_spec(), registry));
  ASSERT_TRUE(stored.tensors.count("gaussian_conditional.coding.tanh_table"));
  const std::vector<double> table = stored.tensors["gaussian_conditional.coding.tanh_table"].to_values();
  ASSERT_EQ(table.size(), 8192u);
  EXPECT_EQ(table[0], 0.0);
  EXPECT_NEAR(table[1024], std::tanh(1.0), 1e-15);
  CodecModel from_stored(tiny_spec(), stored, registry, Device::cpu(), "stored");
  EXPECT_FALSE(from_stored.computed_tables());
  EXPECT_EQ(from_stored.fingerprint(), model.fingerprint());
  // The table enters the fingerprint: another table, another model.
  TensorFile other = stored;
  std::vector<double> changed = table;
  changed[2000] = std::nextafter(changed[2001], 0.0);
  other.tensors["gaussian_conditional.coding.tanh_table"] = Tensor::from_values(changed, {8192}, DType::f64);
  CodecModel with_other_table(tiny_spec(), other, registry, Device::cpu(), "other");
  EXPECT_NE(with_other_table.fingerprint(), model.fingerprint());
  changed[5] = 2;
  other.tensors["gaussian_conditional.coding.tanh_table"] = Tensor::from_values(changed, {8192}, DType::f64);
  EXPECT_TRUE(contains(error_or_none([&] { CodecModel(tiny_spec(), other, registry, Device::cpu(), "broken"); }),
                       "the tanh table must rise from 0 to at most 1"));
}

TEST_F(ChannelConditionalCodec, VersionFiveCodesEachGroupInItsOwnSection) {
  const std::vector<std::uint8_t> bytes = model.compress(testing::position_image(37, 29));
  const std::vector<testing::SectionView> sections = testing::sections_of(bytes);
  ASSERT_EQ(sections.size(), 4u);  // z, then the groups of 2, 2 and 4 channels
  std::vector<std::uint32_t> channels;
  for (const testing::SectionView& section : sections) channels.push_back(section.channels);
  EXPECT_EQ(channels, (std::vector<std::uint32_t>{6, 2, 2, 4}));
  EXPECT_EQ(sections[3].height * 100 + sections[3].width, 810u);
  const nlohmann::json& section = model.codec_section();
  EXPECT_EQ(section["y"]["type"], "channel_groups");
  EXPECT_EQ(section["y"]["decoded"], "y_decoded_join");
  EXPECT_EQ(section["y"]["groups"][2]["quantizer"], "slice2_quantizer");
  model.set_format_version(4);
  const std::vector<std::uint8_t> version4 = model.compress(testing::position_image(37, 29));
  const CodecModel::Latents v5 = model.decode_latents(bytes.data(), bytes.size());
  const CodecModel::Latents v4 = model.decode_latents(version4.data(), version4.size());
  EXPECT_EQ(v5.latent.to_values(), v4.latent.to_values());
  EXPECT_EQ(v5.symbols, v4.symbols);
  // The last group's stream damaged behind a valid checksum: refused naming the coded stream, or decoded.
  const testing::BitFlipOutcome flips =
      testing::flip_coded_stream_bits(bytes, sections[3].stream, 3, 3, [&](const std::vector<std::uint8_t>& flipped) {
        return error_or_none([&] { model.decompress(flipped.data(), flipped.size()); });
      });
  EXPECT_GT(flips.rejected, flips.total * 7 / 10) << flips.rejected << " of " << flips.total;
}

TEST_F(ChannelConditionalCodec, CorruptAndForeignFilesAreRefusedSayingWhy) {
  model.set_format_version(4);
  const std::vector<std::uint8_t> bytes = model.compress(testing::position_image(37, 29));
  auto decode_error = [&](const std::vector<std::uint8_t>& b) {
    return error_or_none([&] { model.decompress(b.data(), b.size()); });
  };
  EXPECT_EQ(decode_error(bytes), "no error");
  EXPECT_TRUE(contains(decode_error({bytes.begin(), bytes.end() - 3}), "truncated"));
  std::vector<std::uint8_t> changed = bytes;
  changed[4] = 3;  // a version-3 file must hold kind 3
  reseal(changed);
  EXPECT_TRUE(contains(decode_error(changed), "model kind 4 in a format-version-3 file")) << decode_error(changed);
  put32(changed, 36, 3);  // a mean-scale file given to this channel-conditional model
  reseal(changed);
  EXPECT_TRUE(contains(decode_error(changed), "a mean-scale-hyperprior file (format version 3), but "
                                              "'tiny-cc.safetensors' is a channel-conditional model"))
      << decode_error(changed);
  CodecModel other(tiny_spec(), tiny_weights(4), registry, Device::cpu(), "other.safetensors");
  const std::vector<std::uint8_t> foreign = other.compress(testing::position_image(37, 29));
  EXPECT_TRUE(contains(decode_error(foreign), "fingerprint")) << decode_error(foreign);
  // This file to the mean-scale model of tiny_mean_scale.json (version 4: named by kind).
  const ModelSpec mean_scale = ModelSpec::from_file(std::string(PLEXUS_TEST_MODELS) + "/tiny_mean_scale.json");
  CodecModel ms(mean_scale, testing::untrained_weights(mean_scale, registry, 3, {}), registry, Device::cpu(),
                "ms.safetensors");
  EXPECT_TRUE(contains(error_or_none([&] { ms.decompress(bytes.data(), bytes.size()); }),
                       "a channel-conditional file (format version 4), but 'ms.safetensors' is a "
                       "mean-scale-hyperprior model"));
  const testing::BitFlipOutcome flips =
      testing::flip_coded_stream_bits(bytes, kHyperpriorHeaderBytes, 7, 3,
                                      [&](const std::vector<std::uint8_t>& flipped) { return decode_error(flipped); });
  EXPECT_GT(flips.rejected, flips.total * 8 / 10) << flips.rejected << " of " << flips.total;
}

// The section of tiny_channel.json written out, changed by `change`.
ModelSpec with_section(const std::function<void(nlohmann::json&)>& change) {
  ModelSpec spec = tiny_spec();
  spec.codec = nlohmann::json::parse(R"({"type": "hyperprior",
      "z": {"type": "factorized", "entropy_model": "hyper_entropy_model"},
      "y": {"type": "channel_groups", "conditional": "gaussian_conditional", "decoded": "y_decoded_join",
            "groups": [{"quantizer": "slice0_quantizer"}, {"quantizer": "slice1_quantizer"},
                       {"quantizer": "slice2_quantizer"}]}})");
  change(spec.codec);
  return spec;
}

TEST(ChannelConditionalCodecSpec, ADeclaredSectionIsCheckedAgainstTheGraphNamingTheNode) {
  EXPECT_EQ(why_not_codable(with_section([](nlohmann::json&) {}), registry), std::nullopt);
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& c) { c["z"]["entropy_model"] = "hyper_entropy"; },
       "/codec/z/entropy_model names 'hyper_entropy', which is not a node of the spec"},
      {[](nlohmann::json& c) { c["y"]["conditional"] = "y_hat_join"; },
       "/codec/y/conditional names node 'y_hat_join', a Concat; it must be a GaussianConditional"},
      {[](nlohmann::json& c) { std::swap(c["y"]["groups"][0], c["y"]["groups"][1]); },
       "'y_hat' must be a Concat of the groups' quantised values, in group order"},
      {[](nlohmann::json& c) { c["y"]["decoded"] = "scales_join"; },
       "its decoded latent, node 'scales_join' (/codec/y/decoded), must be a Concat joining"},
      {[](nlohmann::json& c) { c["y"]["groups"][1]["quantizer"] = "slice1_lrp_support"; },
       "/codec/y/groups/1/quantizer names node 'slice1_lrp_support', a Concat; it must be a QuantizeAroundMean"},
      {[](nlohmann::json& c) { c["y"]["groups"][1]["quantiser"] = "x"; },
       "its codec section at /codec/y/groups/1 has an unknown key 'quantiser' (a group takes quantizer)"},
      {[](nlohmann::json& c) { c["y"]["type"] = "autoregressive"; },
       "its codec section at /codec/y has an unknown key 'decoded' (a 'autoregressive' latent codec takes type, "
       "conditional, quantizer, context_input, context)"},
      {[](nlohmann::json& c) {
         c["y"] = {{"type", "gaussian"},
                   {"conditional", "gaussian_conditional"},
                   {"distribution", "mixture"},
                   {"components", 3}};
       },
       "/codec/y declares a 3-component Gaussian mixture, which this plexus-ae cannot code yet"},
      {[](nlohmann::json& c) {
         c["y"] = {{"type", "gaussian"}, {"conditional", "gaussian_conditional"}, {"distribution", "scale"}};
       },
       "its GaussianConditional node 'gaussian_conditional' has 3 inputs, but /codec/y declares a scale "
       "distribution, which reads [latent, scales]"},
      {[](nlohmann::json& c) { c = c["z"]; },
       "its GaussianConditional node 'gaussian_conditional' is not in the codec section, which would leave its "
       "latent uncoded"},
      {[](nlohmann::json& c) { c["z"] = c["y"]; },
       "/codec/z is a 'channel_groups' latent codec; a hyperprior's hyper-latent is coded 'factorized'"},
      {[](nlohmann::json& c) { c["y"].erase("decoded"); }, "its codec section at /codec/y needs \"decoded\""},
      {[](nlohmann::json& c) {
         c["y"] = {{"type", "gaussian"}, {"conditional", "gaussian_conditional"}};
       },
       "its codec section at /codec/y/distribution must be \"scale\", \"mean_scale\" or \"mixture\", got "
       "nothing"},
      {[](nlohmann::json& c) { c["y"]["type"] = 4; }, "its codec section at /codec/y needs a \"type\""},
  };
  for (const auto& [change, expected] : cases) {
    const ModelSpec spec = with_section(change);
    const std::optional<std::string> problem = why_not_codable(spec, registry);
    ASSERT_TRUE(problem.has_value()) << spec.codec.dump();
    EXPECT_TRUE(contains(*problem, expected)) << *problem;
    // CodecModel refuses it with the same reason.
    const std::string refused = error_or_none([&] { CodecModel(spec, tiny_weights(3), registry, Device::cpu(), "m"); });
    EXPECT_EQ(refused, spec.source + " cannot be used as a codec: " + *problem);
  }
  // The spec parser carries the section, and refuses one that is not an object.
  nlohmann::json json = with_section([](nlohmann::json&) {}).to_json();
  EXPECT_EQ(ModelSpec::from_json(json).codec, json["codec"]);
  json["codec"] = 3;
  EXPECT_TRUE(contains(error_or_none([&] { ModelSpec::from_json(json, "m.json"); }),
                       "m.json: at /codec: the codec section must be an object, got 3"));
}

TEST(ChannelConditionalCodecSpec, SlicesReadingLaterSlicesAreRefusedNamingThem) {
  ModelSpec spec = tiny_spec();
  for (NodeSpec& node : spec.nodes)
    if (node.name == "slice1_scale_support") node.inputs.push_back("y_decoded2");
  const std::optional<std::string> problem = why_not_codable(spec, registry);
  ASSERT_TRUE(problem.has_value());
  EXPECT_TRUE(contains(*problem, "slice 1's 'slice1_scale1_out' reads slice 2, which the decoder has not decoded yet"))
      << *problem;
  ModelSpec sigmoid = tiny_spec();
  for (NodeSpec& node : sigmoid.nodes)
    if (node.name == "slice2_lrp_tanh") node.type = "Sigmoid";
  const std::optional<std::string> no_form = why_not_codable(sigmoid, registry);
  ASSERT_TRUE(no_form.has_value());
  EXPECT_TRUE(contains(*no_form, "slice2_lrp_tanh")) << *no_form;
}

// The real files against eval's estimate on the bundled Kodak crops, with
// the tiny model trained for 150 steps on the bundled training images.
TEST(ChannelConditionalCodecRate, FilesAreWithinAFewPercentOfTheEstimate) {
  testing::ScratchFolder folder{"channel-rate"};
  // 6%: at this tiny model's low rates the 60-byte header and the scale
  // table's steps weigh most (kodim04 measured +2.7%, its mean-scale twin +2.2%).
  testing::expect_files_near_the_estimate(tiny_spec(), registry,
                                          testing::train_for_rate_test("tiny_channel.json", folder.path()), 0.06, 0.1);
}

TEST(ChannelConditionalCodecCrossDevice, CudaFilesDecodeToTheSameLatentsOnTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::vector<data::Image> images = testing::cross_device_images();
  testing::expect_cross_device(tiny_spec(), tiny_weights(11), registry, images);
}

TEST(ChannelConditionalCodecCrossDevice, TheBundledMinnen2020ChannelCompressedOnCudaDecodesOnTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const ModelSpec spec = bundled_spec();
  const TensorFile file = testing::untrained_weights(spec, registry, 13, {{"g_a3.weight", 20}, {"h_a2.weight", 3}});
  testing::expect_cross_device(spec, file, registry, {testing::position_image(200, 130)});
}

// Every full-size Kodak image (the folder PLEXUS_KODAK_DIR names; tools/gpu-check.sh
// passes its KODAK) and random-noise images through the bundled
// minnen2020-channel: compressed on CUDA, decoded on the CPU and on CUDA to
// the same hyper-latent, indices, means, symbols and decoded latent.
TEST(ChannelConditionalCodecCrossDevice, EveryFullSizeKodakImageDecodesToTheSameLatentsOnBothDevices) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const char* kodak = std::getenv("PLEXUS_KODAK_DIR");
  if (!kodak) GTEST_SKIP() << "set PLEXUS_KODAK_DIR to the folder of the 24 Kodak images (kodim01.png ..)";
  std::vector<std::pair<std::string, data::Image>> images;
  for (int k = 1; k <= 24; ++k) {
    const std::string name = (k < 10 ? "kodim0" : "kodim") + std::to_string(k) + ".png";
    images.emplace_back(name, data::read_image(std::string(kodak) + "/" + name));
  }
  std::mt19937 random(7);
  for (int k = 0; k < 2; ++k) {
    data::Image noise;
    noise.width = 320 + 64 * k + 7;
    noise.height = 200 + 3 * k;
    noise.pixels.resize(static_cast<std::size_t>(noise.width) * noise.height * 3);
    for (std::uint8_t& v : noise.pixels) v = static_cast<std::uint8_t>(random() & 255);
    images.emplace_back("noise " + std::to_string(k), noise);
  }
  const ModelSpec spec = bundled_spec();
  const TensorFile file = testing::untrained_weights(spec, registry, 13, {{"g_a3.weight", 20}, {"h_a2.weight", 3}});
  CodecModel on_cuda(spec, file, registry, Device::cuda(), "minnen2020-channel");
  CodecModel on_cpu(spec, file, registry, Device::cpu(), "minnen2020-channel");
  ASSERT_EQ(on_cuda.fingerprint(), on_cpu.fingerprint());
  for (const auto& [name, image] : images) {
    const std::vector<std::uint8_t> bytes = on_cuda.compress(image);
    const CodecModel::Latents encoded = on_cuda.encode_latents(image);
    for (CodecModel* decoder : {&on_cpu, &on_cuda}) {
      const CodecModel::Latents decoded = decoder->decode_latents(bytes.data(), bytes.size());
      const std::string where = name + ", decoded on " + decoder->device().str();
      EXPECT_EQ(decoded.hyper_latent.to_values(), encoded.hyper_latent.to_values()) << where;
      EXPECT_EQ(decoded.indices, encoded.indices) << where;
      EXPECT_EQ(decoded.means, encoded.means) << where;
      EXPECT_EQ(decoded.symbols, encoded.symbols) << where;
      EXPECT_EQ(decoded.latent.to_values(), encoded.latent.to_values()) << where;
    }
  }
}

}  // namespace
}  // namespace plexus::codec
