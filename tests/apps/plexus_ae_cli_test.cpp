// plexus-ae's command line: help, and a clear message with exit code 1 for
// every bad input (never a crash). Each case runs the real executable.
#include <algorithm>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/cli_runner.h"
#include "plexus/context.h"

namespace plexus {
namespace {

using testing::contains;
using testing::run_plexus_ae;
using testing::ScratchFolder;

class PlexusAeCli : public ::testing::Test {
 protected:
  void SetUp() override { testing::save_png(folder / "images/a.png", testing::position_image(40, 36)); }
  testing::CommandResult run(const std::vector<std::string>& args) { return run_plexus_ae(args, folder.path()); }
  // Expects exit code 1, and stderr containing every fragment.
  void expect_error(const std::vector<std::string>& args, const std::vector<std::string>& fragments) {
    auto result = run(args);
    EXPECT_EQ(result.exit_code, 1) << result.describe();
    for (const auto& fragment : fragments)
      EXPECT_TRUE(contains(result.err, fragment)) << "missing \"" << fragment << "\"\n" << result.describe();
  }
  std::string images() const { return folder / "images"; }
  ScratchFolder folder{"ae-cli"};
};

TEST_F(PlexusAeCli, TrainHelpListsOptionsDefaultsModelsAndExamples) {
  auto result = run({"train", "--help"});
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  for (const char* fragment : {"--data",
                               "--val",
                               "--model",
                               "--lambda",
                               "0.01",
                               "--steps",
                               "--batch",
                               "--patch",
                               "256",
                               "--lr",
                               "0.0001",
                               "--device",
                               "auto",
                               "--seed",
                               "--out",
                               "--resume",
                               "--checkpoint-every",
                               "--plugin",
                               "--threads",
                               "bls2017",
                               "bmshj2018-factorized",
                               "Examples:"})
    EXPECT_TRUE(contains(result.out, fragment)) << "missing \"" << fragment << "\"\n" << result.out;
}

TEST_F(PlexusAeCli, EvalHelpAndTopLevelHelp) {
  auto eval = run({"eval", "--help"});
  ASSERT_EQ(eval.exit_code, 0) << eval.describe();
  for (const char* fragment : {"--model", "--data", "--out", "--device", "--plugin", "Examples:"})
    EXPECT_TRUE(contains(eval.out, fragment)) << fragment;
  auto top = run({"--help"});
  ASSERT_EQ(top.exit_code, 0) << top.describe();
  EXPECT_TRUE(contains(top.out, "train")) << top.out;
  EXPECT_TRUE(contains(top.out, "eval")) << top.out;
}

// Every command's --help reads: the pixel limit as "PIXELS" with its bounds in words (not CLI11's
// "INT:INT in [1 - 1099511627776]"), and eval's --level without a default outside its own range.
TEST_F(PlexusAeCli, HelpShowsReadableTypesAndNoDefaultOutsideTheRange) {
  for (const char* command : {"train", "eval", "compress", "decompress"}) {
    auto help = run({command, "--help"});
    ASSERT_EQ(help.exit_code, 0) << help.describe();
    EXPECT_TRUE(contains(help.out, "--max-image-pixels PIXELS")) << command << "\n" << help.out;
    EXPECT_TRUE(contains(help.out, "(1 to 2^40)")) << command << "\n" << help.out;
    EXPECT_FALSE(contains(help.out, "INT:INT in [")) << command << "\n" << help.out;
  }
  auto eval = run({"eval", "--help"});
  EXPECT_FALSE(contains(eval.out, "=-1")) << eval.out;
  EXPECT_FALSE(contains(eval.out, "L:FLOAT")) << eval.out;
  // The bounds are still enforced, with CLI11's message.
  expect_error({"eval", "--model", "m.safetensors", "--data", images(), "--level", "-2"}, {"--level"});
  expect_error({"eval", "--model", "m.safetensors", "--data", images(), "--max-image-pixels", "0"},
               {"--max-image-pixels"});
}

// The line of a command's help that names --precision (with its default:
// "=bf16" or "[bf16]", depending on the CLI11 version).
std::string precision_option_line(const std::string& help) {
  const std::size_t at = help.find("--precision");
  if (at == std::string::npos) return "";
  return help.substr(at, help.find('\n', at) - at);
}

bool shows_default(const std::string& line, const std::string& value) {
  return contains(line, "=" + value) || contains(line, "[" + value + "]");
}

// train defaults to bf16 (fastest, no measured quality cost), eval to tf32
// (accuracy of the reported numbers); both offer every policy.
TEST_F(PlexusAeCli, PrecisionOptionDefaultsToBf16ForTrainingAndTf32ForEval) {
  const std::map<std::string, std::string> defaults = {{"train", "bf16"}, {"eval", "tf32"}};
  for (const auto& [command, shown_default] : defaults) {
    auto help = run({command, "--help"});
    ASSERT_EQ(help.exit_code, 0) << help.describe();
    for (const char* fragment :
         {"--precision", "tf32", "cuDNN", "bf16", "BF16 tensor cores", "the CPU always computes in f32"})
      EXPECT_TRUE(contains(help.out, fragment)) << command << ": missing \"" << fragment << "\"\n" << help.out;
    EXPECT_TRUE(shows_default(precision_option_line(help.out), shown_default))
        << command << ": expected the default " << shown_default << " in \"" << precision_option_line(help.out) << "\"";
  }
  // bf16 applies on CUDA; on the CPU it trains in f32 like any other choice.
  auto bf16 = run({"train", "--data", images(), "--device", "cpu", "--steps", "1", "--patch", "32", "--batch", "1",
                   "--precision", "bf16", "--out", folder / "bf16"});
  EXPECT_EQ(bf16.exit_code, 0) << bf16.describe();
  expect_error({"train", "--data", images(), "--precision", "fp16"}, {"--precision"});
}

TEST_F(PlexusAeCli, NoSubcommandOrUnknownOptionIsExitCode1) {
  EXPECT_EQ(run({}).exit_code, 1);
  expect_error({"train", "--data", images(), "--no-such-option"}, {"--no-such-option"});
  expect_error({"train", "--data", images(), "--steps", "many"}, {"--steps"});
  // Command-line errors read as every other error does.
  expect_error({"compress"}, {"error: images is required", "Run with --help for more information."});
  expect_error({"train", "--data", images(), "--steps", "many"}, {"error: "});
}

TEST_F(PlexusAeCli, MissingAndEmptyDataFolders) {
  const std::string tiny = testing::test_model("tiny.json");
  expect_error({"train", "--model", tiny, "--patch", "16", "--data", folder / "absent", "--out", folder / "run"},
               {"image folder '" + (folder / "absent") + "' does not exist"});
  std::filesystem::create_directories(folder / "empty");
  expect_error({"train", "--model", tiny, "--patch", "16", "--data", folder / "empty", "--out", folder / "run"},
               {"'" + (folder / "empty") + "' holds no PNG or JPEG images"});
  expect_error({"train", "--model", tiny, "--patch", "16", "--out", folder / "run"}, {"--data is required"});
  expect_error({"train", "--model", tiny, "--patch", "16", "--data", images(), "--val", folder / "novals", "--out",
                folder / "run"},
               {"image folder '" + (folder / "novals") + "' does not exist"});
}

TEST_F(PlexusAeCli, UnknownModelNameSuggestsTheCloseOne) {
  expect_error({"train", "--data", images(), "--model", "bls2071"},
               {"unknown model 'bls2071'", "did you mean 'bls2017'", "bmshj2018-factorized"});
  expect_error({"train", "--data", images(), "--model", folder / "missing.json"}, {"missing.json"});
}

TEST_F(PlexusAeCli, SpecWithoutTheAppsBlobsNamesWhatIsMissing) {
  auto spec = nlohmann::json::parse(testing::read_bytes(testing::test_model("tiny.json")));
  auto& nodes = spec["nodes"];
  for (auto it = nodes.begin(); it != nodes.end();)
    it = ((*it)["name"] == "rate" || (*it)["name"] == "distortion") ? nodes.erase(it) : it + 1;
  std::ofstream(folder / "no_losses.json") << spec.dump(2);
  expect_error({"train", "--data", images(), "--model", folder / "no_losses.json", "--patch", "16"},
               {"no_losses.json does not fit plexus-ae", "no node produces 'mse', 'bpp'"});
}

TEST_F(PlexusAeCli, PatchMustBeAMultipleOfTheDerivedStride) {
  expect_error({"train", "--data", images(), "--model", "bls2017", "--patch", "100", "--out", folder / "run"},
               {"--patch 100 is not a multiple of the model's stride 16", "try --patch 96"});
  expect_error(
      {"train", "--data", images(), "--model", "bmshj2018-factorized", "--patch", "24", "--out", folder / "run"},
      {"stride 16"});
  expect_error({"train", "--data", images(), "--model", testing::test_model("tiny.json"), "--patch", "18", "--out",
                folder / "run"},
               {"stride 4"});
}

TEST_F(PlexusAeCli, BadOptionValuesAreNamed) {
  const std::string tiny = testing::test_model("tiny.json");
  const std::vector<std::string> base{"train",   "--data", images(), "--model",     tiny,
                                      "--patch", "16",     "--out",  folder / "run"};
  // The base arguments with one option added or, if the base has it, replaced
  // (CLI11 versions differ on an option given twice).
  auto with = [&](std::vector<std::string> extra) {
    auto args = base;
    const auto given = std::find(args.begin(), args.end(), extra.front());
    if (given != args.end()) args.erase(given, given + 2);
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  expect_error(with({"--batch", "0"}), {"--batch must be in [1, 65536], got 0"});
  expect_error(with({"--batch", "100000"}), {"--batch must be in [1, 65536], got 100000"});
  expect_error(with({"--patch", "70000"}), {"--patch must be in [1, 65536], got 70000"});
  expect_error(with({"--lambda", "-1"}), {"--lambda must be > 0"});
  expect_error(with({"--lr", "0"}), {"--lr must be > 0"});
  expect_error(with({"--steps", "0"}), {"--steps must be in [1, 1125899906842624], got 0"});
  expect_error(with({"--max-image-pixels", "0"}), {"--max-image-pixels"});
  expect_error(with({"--cpu-threads", "100000"}), {"--cpu-threads must be in [0, 1024] (0: every core), got 100000"});
  expect_error(with({"--cpu-threads", "-1"}), {"--cpu-threads must be in [0, 1024] (0: every core), got -1"});
  expect_error(with({"--device", "gpu"}), {"--device: unknown device 'gpu'"});
  expect_error(with({"--plugin", folder / "nothere.so"}), {"nothere.so"});
  if (!cuda_available()) expect_error(with({"--device", "cuda"}), {"--device: device 'cuda' requested"});
}

TEST_F(PlexusAeCli, ResumeWithoutACheckpointNamesThePath) {
  expect_error({"train", "--out", folder / "fresh", "--resume"},
               {"--resume: no checkpoint at '" + (folder / "fresh/checkpoint.safetensors") + "'"});
}

TEST_F(PlexusAeCli, EvalRejectsMissingAndCorruptModelFiles) {
  expect_error({"eval", "--model", folder / "none.safetensors", "--data", images()},
               {"model file '" + (folder / "none.safetensors") + "' does not exist"});
  testing::write_bytes(folder / "corrupt.safetensors", "definitely not safetensors");
  expect_error({"eval", "--model", folder / "corrupt.safetensors", "--data", images()}, {"corrupt.safetensors"});
  expect_error({"eval", "--data", images()}, {"--model"});
}

TEST_F(PlexusAeCli, SuggestsTheClosestCommandOrOption) {
  expect_error({"trian", "--data", images()}, {"unknown command 'trian'; did you mean 'train'?"});
  expect_error({"evl"}, {"unknown command 'evl'; did you mean 'eval'?"});
  expect_error({"frobnicate"}, {"unknown command 'frobnicate'; commands: 'train', 'eval'"});
  expect_error({"train", "--data", images(), "--step", "10"},
               {"'plexus-ae train' has no option '--step'; did you mean '--steps'?", "plexus-ae train --help"});
  expect_error({"train", "--data", images(), "--lamda=0.1"}, {"no option '--lamda'; did you mean '--lambda'?"});
  expect_error({"eval", "--modle", "x", "--data", images()},
               {"'plexus-ae eval' has no option '--modle'; did you mean '--model'?"});
  expect_error({"--verison"}, {"'plexus-ae' has no option '--verison'; did you mean '--version'?"});
  // A value that looks like a command name is not taken for one.
  auto result = run({"train", "--data", "eval", "--stepz", "3"});
  EXPECT_TRUE(contains(result.err, "did you mean '--steps'")) << result.describe();
}

}  // namespace
}  // namespace plexus
