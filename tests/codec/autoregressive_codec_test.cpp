// The autoregressive codec (an "autoregressive" latent codec in the spec's
// codec section: Minnen et al. 2018's context model, a Conv2d with mask "A"
// over the decoded latent, coded position by position in the wavefront
// order): the wavefront's steps against the mask by brute force; round trips
// that give back the symbols, means and latent exactly; every position's
// parameters those the whole integer network gives for the decoded latent;
// one stream; every bit flip refused; foreign files refused; networks and
// sections that cannot be coded refused naming the node and key; the real
// rate against eval's estimate (the tiny spec trained from the command line);
// and (on a GPU) the positions' integers on CUDA equal to the CPU's and files
// compressed on CUDA decoding to the same latents on the CPU, for the tiny
// spec and the bundled mbt2018.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <set>

#include "apps/cli_runner.h"
#include "autoregressive_coding.h"
#include "codec_graph.h"
#include "hyperprior_coding.h"
#include "codec/codec_model_test_support.h"
#include "data/data_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/codec/codec_model.h"
#include "plexus/error.h"
#include "plexus/testing/gtest_helpers.h"

namespace plexus::codec {
namespace {

using testing::contains;
using testing::error_or_none;

const Registry registry = builtin_registry();

// tiny_mean_scale.json (tests/apps/models) with mbt2018's context model: its
// hyper-synthesis gives hyper_params (16 channels); the rounded y (8
// channels) through a conv 5x5/1 with mask "A" (8->16); 1x1 convs of
// [hyper_params, context] (32->24->16, LeakyReLU between) give the
// parameters split into 8 scales and 8 means.
ModelSpec tiny_spec() {
  const ModelSpec mean_scale = ModelSpec::from_file(std::string(PLEXUS_TEST_MODELS) + "/tiny_mean_scale.json");
  ModelSpec spec = mean_scale;
  spec.name = "tiny-autoregressive";
  spec.codec = nlohmann::json::parse(R"({"type": "hyperprior",
      "z": {"type": "factorized", "entropy_model": "hyper_entropy_model"},
      "y": {"type": "autoregressive", "conditional": "gaussian_conditional", "quantizer": "quantizer",
            "context_input": "context_quantizer", "context": "context_prediction"}})");
  spec.nodes.clear();
  for (NodeSpec node : mean_scale.nodes) {
    if (node.name == "h_s1") node.outputs = {"hyper_params"};
    if (node.name == "gaussian_params_split") {
      spec.add_node({"context_quantizer", "UniformNoise", {"y"}, {"y_context"}});
      spec.add_node({"context_prediction",
                     "Conv2d",
                     {"y_context"},
                     {"context"},
                     {{"out_channels", 16}, {"kernel", 5}, {"padding", 2}, {"mask", "A"}}});
      spec.add_node({"entropy_parameters_join", "Concat", {"hyper_params", "context"}, {"entropy_parameters_in"}});
      spec.add_node({"entropy_parameters0",
                     "Conv2d",
                     {"entropy_parameters_in"},
                     {"entropy_parameters0_out"},
                     {{"out_channels", 24}, {"kernel", 1}}});
      spec.add_node(
          {"entropy_parameters0_act", "LeakyReLU", {"entropy_parameters0_out"}, {"entropy_parameters0_leaky"}});
      spec.add_node({"entropy_parameters1",
                     "Conv2d",
                     {"entropy_parameters0_leaky"},
                     {"gaussian_params"},
                     {{"out_channels", 16}, {"kernel", 1}}});
    }
    spec.add_node(node);
  }
  return spec;
}

ModelSpec bundled_spec() { return ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/mbt2018.json"); }

// Weights scaled so that the latent spans many integers and the context matters.
TensorFile tiny_weights(std::uint64_t seed) {
  return testing::untrained_weights(tiny_spec(), registry, seed,
                                    {{"g_a1.weight", 30},
                                     {"h_a1.weight", 4},
                                     {"h_s1.weight", 6},
                                     {"context_prediction.weight", 3},
                                     {"entropy_parameters1.weight", 4}});
}

// The rounded latent symbol * 2^16 + mean of coded latents.
std::vector<std::int64_t> rounded_of(const CodecModel::Latents& latents) {
  std::vector<std::int64_t> rounded(latents.symbols.size());
  for (std::size_t n = 0; n < rounded.size(); ++n)
    rounded[n] = std::int64_t(latents.symbols[n]) * 65536 + latents.means[n];
  return rounded;
}

// A slope a orders every position after the positions a k x k mask "A" reads
// (the rows above within k / 2, and the positions left of it in its row), and
// a - 1 does not; each position is in one step, in the step t = a h + w.
TEST(AutoregressiveWavefront, EveryStepReadsOnlyEarlierStepsThroughTheMask) {
  for (const auto& [height, width] : std::vector<std::pair<int, int>>{{5, 7}, {1, 9}, {8, 1}, {6, 6}}) {
    for (int radius : {1, 2, 3}) {
      const int slope = radius + 1;
      const std::vector<std::vector<std::int64_t>> steps = codec::wavefront_steps(height, width, slope);
      ASSERT_EQ(steps.size(), static_cast<std::size_t>(slope * (height - 1) + width));
      std::vector<int> step_of(static_cast<std::size_t>(height * width), -1);
      for (std::size_t t = 0; t < steps.size(); ++t)
        for (std::size_t k = 0; k < steps[t].size(); ++k) {
          const std::int64_t p = steps[t][k];
          ASSERT_EQ(step_of[static_cast<std::size_t>(p)], -1) << "position " << p << " twice";
          step_of[static_cast<std::size_t>(p)] = static_cast<int>(t);
          ASSERT_EQ(static_cast<std::int64_t>(t), slope * (p / width) + p % width);
          if (k > 0) ASSERT_GT(p / width, steps[t][k - 1] / width) << "a step's positions in increasing rows";
        }
      bool tighter_fails = false;
      for (int h = 0; h < height; ++h)
        for (int w = 0; w < width; ++w)
          for (int i = 0; i <= radius; ++i)
            for (int j = -radius; j <= radius; ++j) {
              if (i == 0 && j >= 0) continue;  // mask "A": the centre and after it are not read
              const int a = h - i, b = w + j;
              if (a < 0 || b < 0 || b >= width) continue;
              EXPECT_LT(step_of[static_cast<std::size_t>(a * width + b)],
                        step_of[static_cast<std::size_t>(h * width + w)])
                  << "(" << h << ", " << w << ") reads (" << a << ", " << b << ")";
              tighter_fails = tighter_fails || (slope - 1) * a + b >= (slope - 1) * h + w;
            }
      if (height > 1 && width > radius) EXPECT_TRUE(tighter_fails) << "slope " << slope - 1 << " would do";
    }
  }
}

class AutoregressiveCodec : public ::testing::Test {
 protected:
  AutoregressiveCodec()
      : file(tiny_weights(3)), model(tiny_spec(), file, registry, Device::cpu(), "tiny-ar.safetensors") {}
  std::string decode_error(const std::vector<std::uint8_t>& bytes) {
    return error_or_none([&] { model.decompress(bytes.data(), bytes.size()); });
  }
  TensorFile file;
  CodecModel model;
};

TEST_F(AutoregressiveCodec, IsAnAutoregressiveMeanScaleHyperprior) {
  EXPECT_EQ(model.kind(), ModelKind::autoregressive);
  EXPECT_STREQ(model_kind_name(model.kind()), "autoregressive");
  EXPECT_EQ(static_cast<int>(ModelKind::autoregressive), 6);
  EXPECT_EQ(model.stride(), 8);
  EXPECT_EQ(model.channels(), 8);
  EXPECT_EQ(model.tables().channels(), 6);
  EXPECT_EQ(model.codec_section()["y"]["type"], "autoregressive");
  EXPECT_EQ(codec::wavefront_slope(model.integer_network()), 3) << "a 5x5 context: t = 3h + w";
  EXPECT_EQ(codec::autoregressive_problem(model.integer_network()), "");
  EXPECT_EQ(why_not_codable(tiny_spec(), registry), std::nullopt);
  EXPECT_EQ(why_not_codable(bundled_spec(), registry), std::nullopt);
  // Only the sectioned format holds an autoregressive latent.
  EXPECT_TRUE(contains(error_or_none([&] { model.set_format_version(3); }), "not 3"));
}

TEST_F(AutoregressiveCodec, RoundTripGivesTheSymbolsMeansAndLatentBack) {
  for (const auto& [width, height] : std::vector<std::pair<int, int>>{{37, 29}, {8, 8}, {1, 1}, {64, 40}, {9, 70}}) {
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
    const data::Image pixels = model.decompress(bytes.data(), bytes.size());
    EXPECT_EQ(pixels.width * 1000 + pixels.height, width * 1000 + height) << size;
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

// Position by position, the coder's indices and means are those the whole
// integer network gives at once for the finished rounded latent: through the
// mask, a position reads only the positions decoded before it. And the
// context matters: with a rounded latent of zeros most means differ.
TEST_F(AutoregressiveCodec, EachPositionsParametersAreTheWholeNetworksForTheDecodedLatent) {
  const data::Image image = testing::position_image(64, 40);
  const CodecModel::Latents latents = model.encode_latents(image);
  std::vector<std::int32_t> z;
  for (double v : latents.hyper_latent.to_values()) z.push_back(static_cast<std::int32_t>(v));
  codec::IntegerNetworkRunner runner(model.integer_network(), Device::cpu());
  runner.start(z, latents.header.hyper_height, latents.header.hyper_width);
  runner.set_input(0, rounded_of(latents));
  const codec::IntegerOutputs whole = runner.outputs(0);
  EXPECT_EQ(whole.indices, latents.indices);
  EXPECT_EQ(whole.means, latents.means);
  runner.set_input(0, std::vector<std::int64_t>(latents.symbols.size(), 0));
  const codec::IntegerOutputs without_context = runner.outputs(0);
  std::size_t context_matters = 0;
  for (std::size_t n = 0; n < latents.means.size(); ++n)
    context_matters += without_context.means[n] != latents.means[n];
  EXPECT_GT(context_matters, latents.means.size() / 2) << "the means read the decoded latent";
  // The runner's own steps, set position by position, give the same.
  codec::AutoregressiveRunner positions(model.integer_network(), Device::cpu());
  runner.start(z, latents.header.hyper_height, latents.header.hyper_width);
  const std::int64_t height = latents.header.latent_height, width = latents.header.latent_width;
  positions.start(runner, height, width);
  const std::vector<std::int64_t> rounded = rounded_of(latents);
  for (std::int64_t p = 0; p < height * width; ++p) {  // raster order: a valid order, one position a step
    const codec::IntegerOutputs out = positions.outputs({p});
    std::vector<std::int64_t> values;
    for (std::int64_t c = 0; c < 8; ++c) {
      const std::size_t n = static_cast<std::size_t>(c * height * width + p);
      ASSERT_EQ(out.indices[static_cast<std::size_t>(c)], latents.indices[n]) << p;
      ASSERT_EQ(out.means[static_cast<std::size_t>(c)], latents.means[n]) << p;
      values.push_back(rounded[n]);
    }
    positions.set({p}, values);
  }
}

TEST_F(AutoregressiveCodec, VersionFiveCodesTheLatentInOneSection) {
  const std::vector<std::uint8_t> bytes = model.compress(testing::position_image(37, 29));
  const std::vector<testing::SectionView> sections = testing::sections_of(bytes);
  ASSERT_EQ(sections.size(), 2u);  // z, y
  EXPECT_EQ(sections[0].channels, 6u);
  EXPECT_EQ(sections[1].channels, 8u);
  EXPECT_EQ(sections[1].height * 100 + sections[1].width, 810u) << "the latent's shape, [8, 8, 10]";
  EXPECT_EQ(model.compress(testing::position_image(37, 29)), bytes) << "compressing twice";
  const testing::BitFlipOutcome flips = testing::flip_coded_stream_bits(
      bytes, sections[1].stream, 5, 3, [&](const std::vector<std::uint8_t>& flipped) { return decode_error(flipped); },
      sections[1].payload + sections[1].length);
  EXPECT_GT(flips.rejected, flips.total * 6 / 10) << flips.rejected << " of " << flips.total;
}

TEST_F(AutoregressiveCodec, EverySingleBitFlipIsRefused) {
  testing::expect_every_bit_flip_refused(model.compress(testing::position_image(13, 9)),
                                         [&](const std::vector<std::uint8_t>& b) { return decode_error(b); });
}

TEST_F(AutoregressiveCodec, ForeignFilesAreRefusedSayingWhy) {
  CodecModel other(tiny_spec(), tiny_weights(4), registry, Device::cpu(), "other.safetensors");
  testing::expect_foreign_files_refused(other, registry,
                                        [&](const std::vector<std::uint8_t>& b) { return decode_error(b); });
}

TEST_F(AutoregressiveCodec, TheStoredCalibrationIsTheOneComputedOnLoad) {
  TensorFile stored = file;
  ASSERT_TRUE(add_coding_tables(stored, tiny_spec(), registry));
  CodecModel from_stored(tiny_spec(), stored, registry, Device::cpu(), "stored");
  EXPECT_FALSE(from_stored.computed_tables());
  EXPECT_EQ(from_stored.fingerprint(), model.fingerprint());
  TensorFile on_images = file;
  ASSERT_TRUE(add_coding_tables(on_images, tiny_spec(), registry, {testing::position_image(64, 40)}));
  CodecModel from_images(tiny_spec(), on_images, registry, Device::cpu(), "images");
  EXPECT_NE(from_images.fingerprint(), model.fingerprint());
  const data::Image image = testing::position_image(37, 29);
  const std::vector<std::uint8_t> bytes = from_images.compress(image);
  EXPECT_EQ(from_images.decode_latents(bytes.data(), bytes.size()).latent.to_values(),
            from_images.encode_latents(image).latent.to_values());
}

// The integer network's own check: a context whose centre weight is not 0
// (a file edited, or a network built by hand) is refused naming the node.
TEST_F(AutoregressiveCodec, ANetworkThatReadsThePositionItselfIsRefused) {
  codec::IntegerNetwork network = model.integer_network();
  for (codec::IntegerNode& node : network.nodes)
    if (node.op == codec::IntegerOp::convolution && node.conv.kernel == 5) node.conv.weight[12] = 1;  // the centre
  const std::string problem = codec::autoregressive_problem(network);
  EXPECT_TRUE(contains(problem, "reads the latent with weights at or after its centre tap")) << problem;
  EXPECT_TRUE(contains(problem, "(convolution)")) << problem;
  EXPECT_TRUE(contains(error_or_none([&] { codec::AutoregressiveRunner(network, Device::cpu()); }),
                       "cannot be coded autoregressively"));
}

ModelSpec changed(const std::function<void(ModelSpec&)>& change) {
  ModelSpec spec = tiny_spec();
  change(spec);
  return spec;
}

NodeSpec& node_of(ModelSpec& spec, const std::string& name) {
  for (NodeSpec& node : spec.nodes)
    if (node.name == name) return node;
  throw ConfigError("no node " + name);
}

TEST(AutoregressiveCodecSpec, ASectionThatDoesNotMatchTheGraphIsRefusedNamingTheNodeAndKey) {
  const std::vector<std::pair<std::function<void(ModelSpec&)>, std::string>> cases = {
      {[](ModelSpec& s) { s.codec["y"]["quantizer"] = "quantiser"; },
       "/codec/y/quantizer names 'quantiser', which is not a node of the spec"},
      {[](ModelSpec& s) { s.codec["y"]["conditional"] = "context_prediction"; },
       "/codec/y/conditional names node 'context_prediction', a Conv2d; it must be a GaussianConditional"},
      {[](ModelSpec& s) { s.codec["y"]["context"] = "context_quantizer"; },
       "/codec/y/context names node 'context_quantizer', a UniformNoise; it must be a Conv2d"},
      {[](ModelSpec& s) { s.codec["y"]["context_input"] = "hyper_quantizer"; },
       "node 'hyper_quantizer' (/codec/y/context_input) must read the latent 'y' that QuantizeAroundMean "
       "'quantizer' quantises"},
      {[](ModelSpec& s) { s.codec["y"].erase("context"); }, "its codec section at /codec/y needs \"context\""},
      {[](ModelSpec& s) { s.codec["y"]["anchor_mask"] = "x"; },
       "its codec section at /codec/y has an unknown key 'anchor_mask' (a 'autoregressive' latent codec takes type, "
       "conditional, quantizer, context_input, context)"},
      {[](ModelSpec& s) { s.codec["z"] = s.codec["y"]; },
       "/codec/z is a 'autoregressive' latent codec; a hyperprior's hyper-latent is coded 'factorized'"},
      // The context without its mask, with mask "B", or strided would read positions not yet decoded.
      {[](ModelSpec& s) { node_of(s, "context_prediction").params.erase("mask"); },
       "node 'context_prediction' (/codec/y/context) must be a Conv2d with \"mask\": \"A\""},
      {[](ModelSpec& s) { node_of(s, "context_prediction").params["mask"] = "B"; },
       "node 'context_prediction' (/codec/y/context) must be a Conv2d with \"mask\": \"A\""},
      {[](ModelSpec& s) {
         node_of(s, "context_prediction").params["padding"] = 4;
         node_of(s, "context_prediction").params["dilation"] = 2;
       },
       "node 'context_prediction' (/codec/y/context) must be a Conv2d with \"mask\": \"A\", an odd kernel, stride 1, "
       "padding kernel / 2"},
      // The graph changed under the section: the parameters read the rounded latent around the context.
      {[](ModelSpec& s) { node_of(s, "entropy_parameters_join").inputs.push_back("y_context"); },
       "'scales' reads the rounded latent 'y_context' other than through node 'context_prediction' "
       "(/codec/y/context)"},
      {[](ModelSpec& s) { node_of(s, "context_prediction").inputs = {"y"}; },
       "node 'context_prediction' (/codec/y/context) must read 'y_context', the output of the context input "
       "'context_quantizer'"},
  };
  for (const auto& [change, expected] : cases) {
    const ModelSpec spec = changed(change);
    const std::optional<std::string> problem = why_not_codable(spec, registry);
    ASSERT_TRUE(problem.has_value()) << spec.codec.dump();
    EXPECT_TRUE(contains(*problem, expected)) << *problem;
  }
  // Without its section the spec is read as a mean-scale hyperprior, whose
  // parameters would read the latent before it is decoded.
  const std::optional<std::string> no_section =
      why_not_codable(changed([](ModelSpec& s) { s.codec = nullptr; }), registry);
  ASSERT_TRUE(no_section.has_value());
  EXPECT_TRUE(contains(*no_section, "which the decoder cannot compute from the hyper-latent")) << *no_section;
}

// eval runs the context on the decoded latent: the spec with its context
// input made a model input of the latent's shape (ae::DecodedContexts).
TEST(AutoregressiveCodecEstimate, TheContextInputIsAModelInput) {
  const ae::DecodedContexts contexts(tiny_spec(), registry);
  ASSERT_EQ(contexts.inputs().size(), 1u);
  EXPECT_EQ(contexts.inputs()[0].blob, "y_context");
  EXPECT_EQ(contexts.inputs()[0].decoded, "y_hat");
  EXPECT_EQ(contexts.spec().inputs, (std::vector<std::string>{"image", "y_context"}));
  for (const NodeSpec& node : contexts.spec().nodes) EXPECT_NE(node.name, "context_quantizer");
  const ModelSpec mean_scale = ModelSpec::from_file(std::string(PLEXUS_TEST_MODELS) + "/tiny_mean_scale.json");
  EXPECT_TRUE(ae::DecodedContexts(mean_scale, registry).empty()) << "no context";
  EXPECT_EQ(contexts.input_shapes({1, 3, 64, 40}).at("y_context"), (Shape{1, 8, 16, 10}));
}

// The tiny spec trained from the command line (300 steps on the bundled
// training images), on the bundled Kodak crops. eval's estimate is the float
// model's rate of its rounding of y, its context reading the file's decoded
// latent: its f32 likelihoods and float_model_rate's f64 ones agree within
// 0.2% (f32's rounding; measured within 1 bit of the latent's 70,000 to
// 107,000). The file codes each element
// with the first table scale at or above the model's, on average 6% wider
// (half a step of the 64-entry table): that costs bits where the model's scales
// are right or too wide, and saves them where it is overconfident, so the file
// lies first-order off eval's estimate, by how well the 300 steps fitted these
// images' scales (trained with FMA: +5.3%, +1.9%, +1.2%; without: -0.8%, -1.7%,
// -0.2%). Each file is within 2% of the float model's rate at the coder's
// resolution (testing::float_model_rate, the scales rounded up to the table;
// testing::RateBounds: the header and the streams' ends, 0.9% of kodim04's
// 10.8 kB, the 16-bit tables' frequencies, the integer network's means and
// scales; measured -0.6% to +1.0% in both builds).
TEST(AutoregressiveCodecRate, FilesAreWithinAFewPercentOfTheEstimate) {
  testing::ScratchFolder folder{"autoregressive-rate"};
  std::ofstream(folder / "tiny_autoregressive.json") << tiny_spec().to_json().dump();
  const std::string path = testing::train_for_rate_test(folder / "tiny_autoregressive.json", folder.path());
  const TensorFile file = load_safetensors(path);
  testing::expect_files_at_the_coders_resolution(tiny_spec(), registry, file);
  auto model = CodecModel::from_file(path, registry, Device::cpu());
  // Without a file, eval decodes with the float model, pass after pass: near
  // the file's latent, and near its estimate; the graph as trained, its
  // context fed round(y), is far off (measured 0.0847 bpp against 0.2040).
  const data::Image crop =
      data::crop_top_left(data::read_image(std::string(PLEXUS_SOURCE_DIR) + "/data/eval-sample/kodim23.png"), 96, 64);
  const std::vector<std::uint8_t> bytes = model->compress(crop);
  const Tensor latent = model->decode_latents(bytes.data(), bytes.size()).latent;
  std::map<std::string, Tensor> with_file{{"y_hat", Tensor()}}, own{{"y_hat", Tensor()}};
  const ae::ImageEvaluation from_file =
      testing::evaluate_with_weights(tiny_spec(), registry, file, crop, model->stride(), &with_file, 0, &latent);
  const ae::ImageEvaluation passes =
      testing::evaluate_with_weights(tiny_spec(), registry, file, crop, model->stride(), &own);
  ModelSpec as_trained = tiny_spec();
  as_trained.codec = nullptr;  // no context input named: the graph's own estimate
  const ae::ImageEvaluation graph = testing::evaluate_with_weights(as_trained, registry, file, crop, model->stride());
  const std::vector<double> decoded = latent.to_values(), fed = with_file.at("y_hat").to_values(),
                            converged = own.at("y_hat").to_values();
  ASSERT_EQ(fed.size(), decoded.size());
  ASSERT_EQ(converged.size(), decoded.size());
  std::size_t fed_near = 0, converged_near = 0;
  for (std::size_t n = 0; n < decoded.size(); ++n) {
    fed_near += std::abs(fed[n] - decoded[n]) < 1e-3;
    converged_near += std::abs(converged[n] - decoded[n]) < 1e-3;
  }
  std::printf("96x64 crop: estimate %.4f bpp with the file's latent, %.4f with the float model's, %.4f fed round(y); "
              "y_hat within 1e-3 of the file's: %zu and %zu of %zu\n",
              from_file.bpp, passes.bpp, graph.bpp, fed_near, converged_near, decoded.size());
  EXPECT_GE(fed_near, decoded.size() * 99 / 100);
  // A rounding that flips moves the means after it: the float decode parts from the file's there (measured:
  // 2442 of 3072 elements within 1e-3, the estimate 0.8% apart).
  EXPECT_GE(converged_near, decoded.size() / 2);
  EXPECT_NEAR(passes.bpp, from_file.bpp, 0.015 * from_file.bpp);
  EXPECT_GT(std::abs(graph.bpp / from_file.bpp - 1), 0.05) << "this model's means follow its context";
}

TEST(AutoregressiveCodecLoading, TakingTheEntropyParametersFreesTheFilesCopyOfTheirWeights) {
  // Loading holds a large model's entropy weights about once: the file's copy
  // of each goes as the float network's is made (f32, as the file holds them).
  CodecGraph graph = split_for_coding(tiny_spec());
  graph.parameter_blobs.rounded_channels = {8};
  const TensorFile file = tiny_weights(5);
  const codec::FloatNetwork kept = float_entropy_parameters(tiny_spec().nodes, graph.parameter_blobs, file, "t");
  TensorFile taken = file;  // shares the tensors; erasing from it leaves `file` whole
  const codec::FloatNetwork took = take_float_entropy_parameters(tiny_spec().nodes, graph.parameter_blobs, taken, "t");
  std::set<std::string> erased;
  for (const auto& entry : file.tensors)
    if (!taken.tensors.count(entry.first)) erased.insert(entry.first);
  const std::set<std::string> entropy_weights{"h_s0.weight",
                                              "h_s0.bias",
                                              "h_s1.weight",
                                              "h_s1.bias",
                                              "context_prediction.weight",
                                              "context_prediction.bias",
                                              "entropy_parameters0.weight",
                                              "entropy_parameters0.bias",
                                              "entropy_parameters1.weight",
                                              "entropy_parameters1.bias"};
  EXPECT_EQ(erased, entropy_weights);
  EXPECT_TRUE(taken.tensors.count("g_a1.weight"));  // the transforms' weights are not the translator's
  // The same network either way, its weights the file's f32 values.
  ASSERT_EQ(took.nodes.size(), kept.nodes.size());
  for (std::size_t n = 0; n < kept.nodes.size(); ++n) {
    EXPECT_EQ(took.nodes[n].conv.weight, kept.nodes[n].conv.weight);
    EXPECT_EQ(took.nodes[n].conv.bias, kept.nodes[n].conv.bias);
  }
  const std::vector<double> file_values = file.tensors.at("entropy_parameters1.weight").to_values();
  const auto last = std::find_if(kept.nodes.begin(), kept.nodes.end(), [](const codec::FloatNode& node) {
    return node.op == codec::IntegerOp::convolution && node.conv.in_channels == 24 && node.conv.out_channels == 16;
  });  // entropy_parameters1, 1x1, 24 -> 16
  ASSERT_NE(last, kept.nodes.end());
  ASSERT_EQ(last->conv.weight.size(), file_values.size());
  for (std::size_t n = 0; n < file_values.size(); ++n)
    EXPECT_EQ(static_cast<double>(last->conv.weight[n]), file_values[n]);
}

std::int32_t model_slope(const CodecModel& model) {
  return codec::AutoregressiveRunner(model.integer_network(), Device::cpu()).slope();
}

// The images of the test below: 64x40 gives a 16x10 latent; 8x8 a 2x2 one, narrower than the
// wavefront's slope (3, for the 5x5 context), so some of its steps have no positions.
const std::pair<int, int> kWideImage{64, 40}, kNarrowImage{8, 8};

TEST(AutoregressiveWavefront, TheNarrowImagesLatentHasEmptySteps) {
  CodecModel model(tiny_spec(), tiny_weights(5), registry, Device::cpu(), "m");
  const std::int32_t slope = model_slope(model);
  EXPECT_EQ(slope, 3);
  for (const auto& [image, narrow] : {std::pair{kWideImage, false}, std::pair{kNarrowImage, true}}) {
    const CodecModel::Latents latents = model.encode_latents(testing::position_image(image.first, image.second));
    const auto steps = codec::wavefront_steps(latents.header.latent_height, latents.header.latent_width, slope);
    const bool some_empty = std::any_of(steps.begin(), steps.end(), [](const auto& step) { return step.empty(); });
    EXPECT_EQ(some_empty, narrow) << image.first << "x" << image.second << ": latent " << latents.header.latent_width
                                  << "x" << latents.header.latent_height;
  }
}

class AutoregressivePositionsCrossDevice : public ::testing::TestWithParam<std::pair<int, int>> {};
INSTANTIATE_TEST_SUITE_P(Latents, AutoregressivePositionsCrossDevice, ::testing::Values(kWideImage, kNarrowImage));

TEST_P(AutoregressivePositionsCrossDevice, ThePositionsIntegersOnCudaAreTheCpus) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  CodecModel model(tiny_spec(), tiny_weights(5), registry, Device::cpu(), "m");
  const CodecModel::Latents latents =
      model.encode_latents(testing::position_image(GetParam().first, GetParam().second));
  std::vector<std::int32_t> z;
  for (double v : latents.hyper_latent.to_values()) z.push_back(static_cast<std::int32_t>(v));
  const std::int64_t height = latents.header.latent_height, width = latents.header.latent_width;
  const std::vector<std::int64_t> rounded = rounded_of(latents);
  std::vector<codec::IntegerOutputs> results[2];
  const Device devices[2] = {Device::cpu(), Device::cuda()};
  for (int d = 0; d < 2; ++d) {
    codec::IntegerNetworkRunner runner(model.integer_network(), devices[d]);
    runner.start(z, latents.header.hyper_height, latents.header.hyper_width);
    codec::AutoregressiveRunner positions(model.integer_network(), devices[d]);
    positions.start(runner, height, width);
    for (const std::vector<std::int64_t>& step : codec::wavefront_steps(height, width, positions.slope())) {
      results[d].push_back(positions.outputs(step));
      std::vector<std::int64_t> values;
      for (std::int64_t p : step)
        for (std::int64_t c = 0; c < 8; ++c)
          values.push_back(rounded[static_cast<std::size_t>(c * height * width + p)]);
      positions.set(step, values);
    }
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (std::size_t t = 0; t < results[0].size(); ++t) {
    EXPECT_EQ(results[1][t].indices, results[0][t].indices) << "step " << t;
    EXPECT_EQ(results[1][t].means, results[0][t].means) << "step " << t;
  }
}

TEST(AutoregressiveCodecCrossDevice, CudaFilesDecodeToTheSameLatentsOnTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::vector<data::Image> images = testing::cross_device_images();
  images.push_back(testing::position_image(1, 1));
  testing::expect_cross_device(tiny_spec(), tiny_weights(11), registry, images);
}

TEST(AutoregressiveCodecCrossDevice, TheBundledMbt2018CompressedOnCudaDecodesOnTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  const ModelSpec spec = bundled_spec();
  const TensorFile file = testing::untrained_weights(spec, registry, 13, {{"g_a3.weight", 20}, {"h_a2.weight", 3}});
  testing::expect_cross_device(spec, file, registry,
                               {testing::position_image(200, 130),
                                data::read_image(std::string(PLEXUS_SOURCE_DIR) + "/data/eval-sample/kodim23.png")});
}

}  // namespace
}  // namespace plexus::codec
