// A variable-rate model (gain units, "level" and "mse_weight" inputs) as a
// codec and through the command line: the file records the rate level (flag
// bit 1, a 4-byte field before the stream size) and decodes at it; a higher
// level costs more bits; levels outside [0, K-1], files without a level for
// a variable-rate model (and the reverse) are refused with a message; train
// --lambdas draws levels and checks its values; compress and eval take
// --level; fractional --quality picks the level in between.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "apps/cli_runner.h"
#include "codec/codec_model_test_support.h"
#include "data/data_test_support.h"
#include "plexus/builtin_layers.h"
#include "plexus/codec/autoencoder_contract.h"
#include "plexus/codec/bitstream.h"
#include "plexus/codec/codec_model.h"
#include "plexus/testing/gtest_helpers.h"
#include "plexus/codec/quality_catalog.h"

namespace plexus::codec {
namespace {

using testing::contains;
using testing::error_or_none;
using testing::get32;
using testing::put32;
using testing::reseal;
using testing::ScratchFolder;

const Registry registry = builtin_registry();
const std::string kTinySpec = std::string(PLEXUS_TEST_MODELS) + "/tiny_mean_scale_vr.json";

ModelSpec tiny_spec() { return ModelSpec::from_file(kTinySpec); }
ModelSpec fixed_rate_spec() { return ModelSpec::from_file(std::string(PLEXUS_TEST_MODELS) + "/tiny_mean_scale.json"); }

TensorFile tiny_weights(const ModelSpec& spec) {
  return testing::untrained_weights(spec, registry, 5, {{"g_a1.weight", 30}, {"h_a1.weight", 4}, {"h_s1.weight", 6}});
}

class VariableRateCodec : public ::testing::Test {
 protected:
  VariableRateCodec() : file(tiny_weights(tiny_spec())), model(tiny_spec(), file, registry, Device::cpu(), "tiny-vr") {}
  TensorFile file;
  CodecModel model;
  const data::Image image = testing::position_image(40, 24);
};

TEST_F(VariableRateCodec, HasTheLevelsOfItsGainUnits) {
  EXPECT_EQ(rate_levels(tiny_spec()), 3);
  EXPECT_EQ(rate_levels(fixed_rate_spec()), 0);
  EXPECT_EQ(model.rate_levels(), 3);
  EXPECT_EQ(model.kind(), ModelKind::mean_scale_hyperprior);
  EXPECT_EQ(why_not_codable(tiny_spec(), registry), std::nullopt);
  EXPECT_EQ(why_not_codable(ModelSpec::from_file(std::string(PLEXUS_SOURCE_DIR) + "/models/specs/mbt2018-mean-vr.json"),
                            registry),
            std::nullopt);
}

TEST_F(VariableRateCodec, AVersionFiveFileRecordsTheLevelInItsHeader) {
  for (double level : {0.0, 1.25, 2.0}) {
    model.set_rate_level(level);
    const std::vector<std::uint8_t> bytes = model.compress(image);
    EXPECT_EQ(get32(bytes, 4), 5u | unsigned(kFlagRateLevel) << 16) << "format version 5, the rate-level flag";
    EXPECT_EQ(get32(bytes, 32), static_cast<std::uint32_t>(level * 65536)) << level;
    CodecModel decoder(tiny_spec(), file, registry, Device::cpu(), "tiny-vr");
    const CodecModel::Latents decoded = decoder.decode_latents(bytes.data(), bytes.size());
    EXPECT_EQ(decoded.header.rate_level, static_cast<std::uint32_t>(level * 65536));
    EXPECT_EQ(decoded.symbols, model.encode_latents(image).symbols) << level;
  }
  // Without the flag, the level field must be 0; a one-rate model refuses a file with a level.
  std::vector<std::uint8_t> bytes = model.compress(image);
  bytes[6] = 0;
  reseal(bytes);
  EXPECT_TRUE(contains(error_or_none([&] { model.decode_latents(bytes.data(), bytes.size()); }),
                       "a rate level of 131072 without flag bit 1"));
  put32(bytes, 32, 0);
  reseal(bytes);
  EXPECT_TRUE(contains(error_or_none([&] { model.decode_latents(bytes.data(), bytes.size()); }),
                       "it holds no rate level, but 'tiny-vr' is a variable-rate model"));
}

TEST_F(VariableRateCodec, TheFileRecordsTheLevelAndDecodesAtIt) {
  model.set_format_version(3);
  for (double level : {0.0, 1.25, 2.0}) {
    model.set_rate_level(level);
    const std::vector<std::uint8_t> bytes = model.compress(image);
    EXPECT_EQ(get32(bytes, 4) & 0xffff, 3u) << "format version 3, the mean-scale hyperprior";
    EXPECT_EQ(get32(bytes, 4) >> 16, unsigned(kFlagRateLevel)) << "flags: the rate level, not grey";
    EXPECT_EQ(get32(bytes, 52), static_cast<std::uint32_t>(level * 65536)) << level;
    EXPECT_EQ(get32(bytes, 56) + 64, bytes.size()) << "S after the level; header 60 bytes, checksum 4";
    // Another model object at another level decodes the file at the file's level.
    CodecModel decoder(tiny_spec(), file, registry, Device::cpu(), "tiny-vr");
    decoder.set_rate_level(level == 0 ? 2.0 : 0.0);
    const CodecModel::Latents encoded = model.encode_latents(image);
    const CodecModel::Latents decoded = decoder.decode_latents(bytes.data(), bytes.size());
    EXPECT_EQ(decoded.header.rate_level, static_cast<std::uint32_t>(level * 65536));
    EXPECT_EQ(decoded.symbols, encoded.symbols) << level;
    EXPECT_EQ(decoded.latent.to_values(), encoded.latent.to_values()) << level;
    // The decoded image is the float model's at that level, within the integer means' rounding.
    const data::Image decompressed = decoder.decompress(bytes.data(), bytes.size());
    const ae::ImageEvaluation eval =
        testing::evaluate_with_weights(tiny_spec(), registry, file, image, model.stride(), nullptr, level);
    EXPECT_GT(data::psnr(decompressed, eval.reconstruction), 40.0) << level;
  }
}

TEST_F(VariableRateCodec, AHigherLevelCostsMoreBits) {
  // The gains start at sqrt(lambda_k / their geometric mean): a higher level scales y up, so more symbols.
  std::size_t previous = 0;
  for (double level : {0.0, 1.0, 2.0}) {
    model.set_rate_level(level);
    const std::size_t size = model.compress(image).size();
    EXPECT_GT(size, previous) << "level " << level;
    previous = size;
  }
}

TEST_F(VariableRateCodec, RefusesLevelsOutsideItsRange) {
  for (double level : {-0.5, 2.001, 7.0}) {
    const std::string message = error_or_none([&] { model.set_rate_level(level); });
    EXPECT_TRUE(contains(message, "has levels 0 to 2")) << message;
  }
  CodecModel fixed(fixed_rate_spec(), tiny_weights(fixed_rate_spec()), registry, Device::cpu(), "tiny-fixed");
  EXPECT_EQ(fixed.rate_levels(), 0);
  const std::string message = error_or_none([&] { fixed.set_rate_level(1); });
  EXPECT_TRUE(contains(message, "'tiny-fixed' is a model of one rate")) << message;
}

TEST_F(VariableRateCodec, RefusesALevelTheModelDoesNotHave) {
  model.set_format_version(3);
  model.set_rate_level(2);
  std::vector<std::uint8_t> bytes = model.compress(image);
  put32(bytes, 52, 2 * 65536 + 1);  // just above level 2
  reseal(bytes);
  const std::string message = error_or_none([&] { model.decode_latents(bytes.data(), bytes.size()); });
  EXPECT_TRUE(contains(message, "rate level 2.0000") && contains(message, "out of range")) << message;
}

TEST_F(VariableRateCodec, FilesWithAndWithoutALevelNeedTheirKindOfModel) {
  model.set_format_version(3);
  const std::vector<std::uint8_t> variable = model.compress(image);
  BitstreamExpectation one_rate;
  one_rate.kind = ModelKind::mean_scale_hyperprior;
  one_rate.fingerprint = model.fingerprint();
  one_rate.model = "fixed.safetensors";
  one_rate.channels = 8;
  one_rate.stride = 8;
  one_rate.latent_per_stride = 2;
  one_rate.hyper_channels = 6;
  std::string message = error_or_none([&] { parse_bitstream(variable.data(), variable.size(), one_rate); });
  EXPECT_TRUE(contains(message, "it holds a rate level, but 'fixed.safetensors' is a model of one rate")) << message;
  // The same file without its level field and flag: a variable-rate model refuses it.
  std::vector<std::uint8_t> stripped = variable;
  stripped.erase(stripped.end() - 4, stripped.end());            // the checksum, resealed below
  stripped.erase(stripped.begin() + 52, stripped.begin() + 56);  // the level field
  put32(stripped, 4, 3);                                         // version 3, no flags
  stripped.resize(stripped.size() + 4);
  reseal(stripped);
  message = error_or_none([&] { model.decode_latents(stripped.data(), stripped.size()); });
  EXPECT_TRUE(contains(message, "it holds no rate level, but 'tiny-vr' is a variable-rate model")) << message;
  // Truncated inside the level field.
  message = error_or_none([&] { model.decode_latents(variable.data(), 58); });
  EXPECT_TRUE(contains(message, "truncated")) << message;
}

// Files compressed on CUDA at a fractional level decode to the same latents
// on the CPU, for the tiny spec and for the shipped model.
TEST_F(VariableRateCodec, FilesFromCudaDecodeToTheSameLatentsOnTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  std::vector<data::Image> images{testing::position_image(40, 24), testing::position_image(17, 33)};
  testing::expect_cross_device(tiny_spec(), file, registry, images, 1.5);
  const std::string shipped = std::string(PLEXUS_SOURCE_DIR) + "/models/trained/mbt2018-mean-vr/model.safetensors";
  if (!std::filesystem::exists(shipped)) GTEST_SKIP() << "no shipped variable-rate model in this tree";
  const TensorFile weights = load_safetensors(shipped);
  const data::Image kodim = data::read_image(std::string(PLEXUS_SOURCE_DIR) + "/data/eval-sample/kodim23.png");
  for (double level : {0.0, 2.5, 5.0})
    testing::expect_cross_device(spec_from_checkpoint(weights, shipped, registry), weights, registry, {kodim}, level);
}

TEST(VariableRateCli, TrainsWithLambdasAndCodesAtALevel) {
  ScratchFolder folder{"ae-variable-rate"};
  testing::save_png(folder / "images/a.png", testing::position_image(48, 40));
  testing::save_png(folder / "images/b.png", testing::position_image(40, 32));
  auto trained = testing::run_plexus_ae({"train",
                                         "--data",
                                         folder / "images",
                                         "--model",
                                         kTinySpec,
                                         "--lambdas",
                                         "0.005,0.01,0.02",
                                         "--patch",
                                         "16",
                                         "--batch",
                                         "3",
                                         "--steps",
                                         "4",
                                         "--device",
                                         "cpu",
                                         "--threads",
                                         "1",
                                         "--val",
                                         folder / "images",
                                         "--val-every",
                                         "2",
                                         "--out",
                                         folder / "run"},
                                        folder.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_TRUE(contains(trained.err, "one per rate level")) << trained.err;
  EXPECT_TRUE(contains(trained.err, "validation at step 2")) << trained.err;  // at the middle level
  const std::string model = folder / "run/model.safetensors";
  auto missing = testing::run_plexus_ae(
      {"compress", "--model", model, folder / "images/a.png", "-o", folder / "a.pxae", "--device", "cpu"},
      folder.path());
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_TRUE(contains(missing.err, "variable-rate model of 3 rate levels: give --level")) << missing.err;
  for (const char* level : {"0", "1.5", "2"}) {
    const std::string pxae = folder / (std::string("a-") + level + ".pxae");
    auto compressed = testing::run_plexus_ae(
        {"compress", "--model", model, "--level", level, folder / "images/a.png", "-o", pxae, "--device", "cpu"},
        folder.path());
    ASSERT_EQ(compressed.exit_code, 0) << compressed.describe();
    auto decompressed = testing::run_plexus_ae(
        {"decompress", "--model", model, pxae, "-o", pxae + ".png", "--device", "cpu"}, folder.path());
    ASSERT_EQ(decompressed.exit_code, 0) << decompressed.describe();
    EXPECT_TRUE(contains(decompressed.out, "48x40")) << decompressed.out;
  }
  auto bad_level = testing::run_plexus_ae({"compress", "--model", model, "--level", "3", folder / "images/a.png", "-o",
                                           folder / "c.pxae", "--device", "cpu"},
                                          folder.path());
  EXPECT_NE(bad_level.exit_code, 0);
  EXPECT_TRUE(contains(bad_level.err, "has levels 0 to 2")) << bad_level.err;
  auto evaluated = testing::run_plexus_ae({"eval", "--model", model, "--data", folder / "images", "--level", "1",
                                           "--device", "cpu", "--out", folder / "eval"},
                                          folder.path());
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.describe();
  EXPECT_TRUE(contains(evaluated.err, "rate level 1")) << evaluated.err;
  std::ifstream report(folder / "eval/eval.json");
  const std::string text((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(text, "\"level\": 1.0")) << text;
  auto no_level =
      testing::run_plexus_ae({"eval", "--model", model, "--data", folder / "images", "--device", "cpu"}, folder.path());
  EXPECT_NE(no_level.exit_code, 0);
  EXPECT_TRUE(contains(no_level.err, "give --level")) << no_level.err;
  auto not_a_level = testing::run_plexus_ae({"compress", "--model", model, "--level", "two", folder / "images/a.png",
                                             "-o", folder / "d.pxae", "--device", "cpu"},
                                            folder.path());
  EXPECT_NE(not_a_level.exit_code, 0);
  EXPECT_TRUE(contains(not_a_level.err, "--level takes a rate level, a number from 0 (the lowest rate) to K-1, got "
                                        "'two'"))
      << not_a_level.err;
  auto with_quality = testing::run_plexus_ae({"compress", "--quality", "2", "--level", "1", folder / "images/a.png",
                                              "-o", folder / "e.pxae", "--device", "cpu"},
                                             folder.path());
  EXPECT_NE(with_quality.exit_code, 0);
  EXPECT_TRUE(contains(with_quality.err, "give --level with --model; --quality chooses the level itself"))
      << with_quality.err;
}

// --level on a model of one rate is refused by compress and eval.
TEST(VariableRateCli, ALevelNeedsAVariableRateModel) {
  ScratchFolder folder{"ae-variable-rate-fixed"};
  testing::save_png(folder / "images/a.png", testing::position_image(32, 32));
  auto trained = testing::run_plexus_ae(
      {"train", "--data", folder / "images", "--model", std::string(PLEXUS_TEST_MODELS) + "/tiny_mean_scale.json",
       "--patch", "16", "--steps", "1", "--device", "cpu", "--out", folder / "run"},
      folder.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  const std::string model = folder / "run/model.safetensors";
  auto compressed = testing::run_plexus_ae({"compress", "--model", model, "--level", "1", folder / "images/a.png", "-o",
                                            folder / "a.pxae", "--device", "cpu"},
                                           folder.path());
  EXPECT_NE(compressed.exit_code, 0);
  EXPECT_TRUE(contains(compressed.err, "is a model of one rate; a rate level applies only to a variable-rate model"))
      << compressed.err;
  auto evaluated = testing::run_plexus_ae(
      {"eval", "--model", model, "--data", folder / "images", "--level", "1", "--device", "cpu"}, folder.path());
  EXPECT_NE(evaluated.exit_code, 0);
  EXPECT_TRUE(contains(evaluated.err, "--level is for a variable-rate model; '" + model + "' has one rate"))
      << evaluated.err;
}

// The data-parallel path (--gpus 1 on the CPU: a worker process that reads
// the options again) draws the levels too.
TEST(VariableRateCli, TrainsThroughTheDataParallelPath) {
  ScratchFolder folder{"ae-variable-rate-parallel"};
  testing::save_png(folder / "images/a.png", testing::position_image(48, 40));
  auto trained = testing::run_plexus_ae({"train",
                                         "--data",
                                         folder / "images",
                                         "--model",
                                         kTinySpec,
                                         "--lambdas",
                                         "0.005,0.01,0.02",
                                         "--patch",
                                         "16",
                                         "--batch",
                                         "2",
                                         "--steps",
                                         "3",
                                         "--gpus",
                                         "1",
                                         "--device",
                                         "cpu",
                                         "--threads",
                                         "1",
                                         "--out",
                                         folder / "run"},
                                        folder.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_TRUE(contains(trained.err, "one per rate level")) << trained.err;
  EXPECT_TRUE(std::filesystem::exists(folder / "run/model.safetensors"));
}

TEST(VariableRateCli, LambdasMustFitTheModel) {
  ScratchFolder folder{"ae-variable-rate-lambdas"};
  testing::save_png(folder / "images/a.png", testing::position_image(32, 32));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--model", kTinySpec, "--lambdas", "0.01,0.02"}, "3 rate levels: give --lambdas with 3 values"},
      {{"--model", kTinySpec, "--lambdas", "0.01,0.03,0.02"}, "--lambdas must increase with the level"},
      {{"--model", kTinySpec, "--lambdas", "0.01,0,0.02"}, "value 2 must be > 0"},
      {{"--model", std::string(PLEXUS_TEST_MODELS) + "/tiny_mean_scale.json", "--lambdas", "0.01,0.02"},
       "has one rate: give --lambda"}};
  for (const auto& [options, expected] : cases) {
    std::vector<std::string> args{"train",    "--data", folder / "images", "--steps",     "1", "--patch", "16",
                                  "--device", "cpu",    "--out",           folder / "run"};
    args.insert(args.end(), options.begin(), options.end());
    auto result = testing::run_plexus_ae(args, folder.path());
    EXPECT_NE(result.exit_code, 0) << expected;
    EXPECT_TRUE(contains(result.err, expected)) << result.err;
  }
}

TEST(VariableRateCatalog, AFractionalQualityTakesTheLevelInBetween) {
  ScratchFolder folder{"ae-variable-rate-catalog"};
  std::filesystem::create_directories(folder / "vr");
  std::ofstream(folder / "vr/model.safetensors") << "x";
  std::filesystem::create_directories(folder / "other");
  std::ofstream(folder / "other/model.safetensors") << "x";
  std::ofstream(folder / "catalog.json") << R"({"qualities": [
    {"quality": 1, "spec": "mbt2018-mean-vr", "lambda": 0.0018, "level": 0, "model": "vr/model.safetensors"},
    {"quality": 2, "spec": "mbt2018-mean-vr", "lambda": 0.0035, "level": 1, "model": "vr/model.safetensors"},
    {"quality": 3, "spec": "mbt2018-mean-vr", "lambda": 0.0067, "level": 2, "model": "vr/model.safetensors"},
    {"quality": 4, "spec": "bmshj2018-hyperprior", "lambda": 0.013, "model": "other/model.safetensors"}]})";
  const QualityCatalog catalog = load_quality_catalog(folder / "catalog.json");
  const QualityChoice two = choose_quality(catalog, 2);
  EXPECT_EQ(std::filesystem::path(two.path), std::filesystem::path(folder / "vr/model.safetensors"));
  EXPECT_EQ(two.level, 1.0);
  EXPECT_EQ(choose_quality(catalog, 2.25).level, 1.25);
  EXPECT_EQ(choose_quality(catalog, 4).level, std::nullopt);
  const std::string message = error_or_none([&] { choose_quality(catalog, 3.5); });
  EXPECT_TRUE(contains(message, "quality 3.5 lies between qualities 3 and 4, which are not rate levels of one "
                                "variable-rate model"))
      << message;
  const std::string commands = training_commands(catalog, catalog.entries[0]);
  EXPECT_TRUE(contains(commands, "--lambdas 0.0018,0.0035,0.0067")) << commands;
}

}  // namespace
}  // namespace plexus::codec
