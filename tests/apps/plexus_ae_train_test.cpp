// plexus-ae train end to end on the CPU, with a tiny model (tests/apps/
// models/tiny.json, N=8, stride 4) on tiny patches: the loss falls, resuming
// is bit-identical to not stopping (after --resume and after Ctrl-C), a NaN
// loss keeps the last good checkpoint, metrics are logged, and both bundled
// models take training steps.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli_runner.h"
#include "apps/metrics_log_reader.h"
#include "apps/same_tensors.h"
#include "plexus/checkpoint.h"

namespace plexus {
namespace {

using testing::contains;
using testing::ScratchFolder;

using testing::same_tensors;

using testing::read_metrics;

class PlexusAeTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    // Smooth gradients and shapes: easy content a tiny model learns fast.
    testing::save_png(folder / "images/a.png", testing::position_image(48, 40));
    testing::save_png(folder / "images/b.png", testing::position_image(40, 52));
    testing::save_png(folder / "images/sub/c.png", testing::position_image(20, 12));  // smaller than nothing: fine
  }
  // Common arguments of a tiny CPU run writing to <scratch>/<out>.
  std::vector<std::string> tiny_run(const std::string& out, std::int64_t steps, std::vector<std::string> extra = {}) {
    return testing::tiny_train_args(folder / "images", folder / out, steps, std::move(extra));
  }
  testing::CommandResult run(const std::vector<std::string>& args) {
    return testing::run_plexus_ae(args, folder.path());
  }
  ScratchFolder folder{"ae-train"};
};

TEST_F(PlexusAeTrain, LossFallsAndMetricsAreLogged) {
  auto result = run(tiny_run("run", 80, {"--log-every", "10", "--val", folder / "images", "--val-every", "40"}));
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_TRUE(std::filesystem::exists(folder / "run/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(folder / "run/checkpoint.safetensors"));
  auto train = read_metrics(folder / "run/metrics.jsonl", "train");
  ASSERT_EQ(train.size(), 8u);
  for (const char* key :
       {"step", "loss", "mse", "bpp", "psnr", "lr", "images_per_second", "loader_wait_seconds", "elapsed_seconds"})
    EXPECT_TRUE(train[0].contains(key)) << key;
  EXPECT_EQ(train.back()["step"], 80);
  const double first = train.front()["loss"], last = train.back()["loss"];
  EXPECT_LT(last, 0.7 * first) << "loss went from " << first << " to " << last;
  auto val = read_metrics(folder / "run/metrics.jsonl", "val");
  ASSERT_EQ(val.size(), 2u);
  EXPECT_EQ(val[0]["step"], 40);
  EXPECT_EQ(val[0]["images"], 3);
  EXPECT_GT(val[1]["psnr"].get<double>(), 0.0);
  EXPECT_TRUE(contains(result.out, "trained 80 steps")) << result.out;
  EXPECT_TRUE(contains(result.err, "validation at step 80")) << result.err;
}

TEST_F(PlexusAeTrain, ResumeIsBitIdenticalToAnUninterruptedRun) {
  auto whole = run(tiny_run("whole", 12, {"--checkpoint-every", "5"}));
  ASSERT_EQ(whole.exit_code, 0) << whole.describe();
  auto first = run(tiny_run("split", 7, {"--checkpoint-every", "5"}));
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  // Only --out, --resume and the new total: the rest comes from the checkpoint.
  auto second = run({"train", "--out", folder / "split", "--resume", "--steps", "12", "--device", "cpu"});
  ASSERT_EQ(second.exit_code, 0) << second.describe();
  EXPECT_TRUE(same_tensors(folder / "whole/model.safetensors", folder / "split/model.safetensors"));
  // Parameters and Adam moments.
  EXPECT_TRUE(same_tensors(folder / "whole/checkpoint.safetensors", folder / "split/checkpoint.safetensors"));
  // The metrics log of the resumed run continues where the checkpoint left off.
  auto steps = read_metrics(folder / "split/metrics.jsonl", "train");
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back()["step"], 12);
}

// Clipping and the step schedule are saved in the checkpoint and come back on
// --resume without being given again: the split run matches the whole one
// bit for bit only if both did (a run clipped at the default 1.0 differs
// from one clipped at 0.05, checked below, and the lr is checked per step).
TEST_F(PlexusAeTrain, ClippingAndScheduleAreRecordedAndResumed) {
  const std::vector<std::string> recipe{"--checkpoint-every", "5", "--clip-grad-norm", "0.05", "--lr-schedule", "step",
                                        "--lr-step-every",    "4", "--lr-decay",       "0.5",  "--log-every",   "1"};
  auto whole = run(tiny_run("whole", 12, recipe));
  ASSERT_EQ(whole.exit_code, 0) << whole.describe();
  auto unclipped =
      run(tiny_run("unclipped", 12, {"--lr-schedule", "step", "--lr-step-every", "4", "--lr-decay", "0.5"}));
  ASSERT_EQ(unclipped.exit_code, 0) << unclipped.describe();
  EXPECT_FALSE(same_tensors(folder / "whole/model.safetensors", folder / "unclipped/model.safetensors"))
      << "clipping at 0.05 must change this run";
  auto first = run(tiny_run("split", 7, recipe));
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  auto second = run({"train", "--out", folder / "split", "--resume", "--steps", "12", "--device", "cpu"});
  ASSERT_EQ(second.exit_code, 0) << second.describe();
  EXPECT_TRUE(same_tensors(folder / "whole/model.safetensors", folder / "split/model.safetensors"));
  EXPECT_TRUE(same_tensors(folder / "whole/checkpoint.safetensors", folder / "split/checkpoint.safetensors"));

  // lr of step k (1-based) = 0.005 * 0.5^floor((k - 1) / 4), in both runs.
  auto steps = read_metrics(folder / "split/metrics.jsonl", "train");
  ASSERT_EQ(steps.size(), 12u);
  for (const auto& entry : steps) {
    const int k = entry["step"];
    EXPECT_DOUBLE_EQ(entry["lr"].get<double>(), 0.005 * std::pow(0.5, (k - 1) / 4)) << "step " << k;
  }
  // The clock continues after --resume.
  for (std::size_t i = 1; i < steps.size(); ++i)
    EXPECT_GE(steps[i]["elapsed_seconds"].get<double>(), steps[i - 1]["elapsed_seconds"].get<double>()) << i;
  TensorFile checkpoint = load_safetensors(folder / "split/checkpoint.safetensors");
  auto settings = nlohmann::json::parse(checkpoint.metadata.at("plexus_ae.train"));
  EXPECT_EQ(settings["clip_grad_norm"], 0.05);
  EXPECT_EQ(settings["lr_schedule"], "step");
  EXPECT_TRUE(checkpoint.metadata.count("plexus_ae.progress"));
}

TEST_F(PlexusAeTrain, AnExistingRunIsNotOverwrittenWithoutResume) {
  ASSERT_EQ(run(tiny_run("run", 2)).exit_code, 0);
  auto again = run(tiny_run("run", 2));
  EXPECT_EQ(again.exit_code, 1) << again.describe();
  EXPECT_TRUE(contains(again.err, "already holds a checkpoint")) << again.err;
}

TEST_F(PlexusAeTrain, CtrlCSavesACheckpointAndTheResumedRunMatches) {
  testing::Process process(PLEXUS_AE_EXECUTABLE, tiny_run("interrupted", 100000, {"--log-every", "1"}), folder.path());
  // Interrupt once a few steps are logged.
  ASSERT_TRUE(testing::wait_until(
      [&] { return read_metrics(folder / "interrupted/metrics.jsonl", "train").size() >= 3 || !process.running(); },
      120))
      << "no progress within 120 s";
  process.send(SIGINT);
  auto result = process.wait();
  EXPECT_EQ(result.exit_code, 130) << result.describe();
  EXPECT_TRUE(contains(result.err, "interrupted by Ctrl-C (SIGINT) after step")) << result.err;
  EXPECT_TRUE(contains(result.err, "--resume")) << result.err;
  ASSERT_TRUE(std::filesystem::exists(folder / "interrupted/checkpoint.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(folder / "interrupted/model.safetensors"));

  // The step it stopped at is the last line of its metrics log.
  const std::int64_t stopped = read_metrics(folder / "interrupted/metrics.jsonl", "train").back()["step"];
  const std::string total = std::to_string(stopped + 3);
  auto resumed = run({"train", "--out", folder / "interrupted", "--resume", "--steps", total, "--device", "cpu"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  auto straight = run(tiny_run("straight", stopped + 3));
  ASSERT_EQ(straight.exit_code, 0) << straight.describe();
  EXPECT_TRUE(same_tensors(folder / "interrupted/model.safetensors", folder / "straight/model.safetensors"));
}

TEST_F(PlexusAeTrain, NanLossStopsNamingTheStepAndKeepsTheLastGoodCheckpoint) {
  // PoisonAfter turns the reconstruction into NaN from the 6th training step.
  auto poisoned = run({"train",
                       "--data",
                       folder / "images",
                       "--model",
                       testing::test_model("tiny_poisoned.json"),
                       "--plugin",
                       PLEXUS_TEST_POISON_PLUGIN,
                       "--patch",
                       "16",
                       "--batch",
                       "2",
                       "--lr",
                       "0.005",
                       "--steps",
                       "50",
                       "--seed",
                       "3",
                       "--device",
                       "cpu",
                       "--threads",
                       "1",
                       "--checkpoint-every",
                       "4",
                       "--out",
                       folder / "poisoned"});
  EXPECT_EQ(poisoned.exit_code, 1) << poisoned.describe();
  EXPECT_TRUE(contains(poisoned.err, "the loss is NaN at step 6")) << poisoned.err;
  EXPECT_TRUE(contains(poisoned.err, "The last good checkpoint, '" + (folder / "poisoned/checkpoint.safetensors") +
                                         "' at step 4, is kept"))
      << poisoned.err;
  EXPECT_FALSE(std::filesystem::exists(folder / "poisoned/model.safetensors"));
  // The kept checkpoint is the step-4 state: equal to a clean 4-step run's
  // (the poison layer is an identity until then and has no parameters).
  auto clean = run(tiny_run("clean", 4));
  ASSERT_EQ(clean.exit_code, 0) << clean.describe();
  EXPECT_TRUE(same_tensors(folder / "poisoned/checkpoint.safetensors", folder / "clean/checkpoint.safetensors"));
}

TEST_F(PlexusAeTrain, NanBeforeTheFirstCheckpointSaysSo) {
  auto poisoned = run({"train", "--data", folder / "images", "--model", testing::test_model("tiny_poisoned.json"),
                       "--plugin", PLEXUS_TEST_POISON_PLUGIN, "--patch", "16", "--batch", "1", "--steps", "50",
                       "--device", "cpu", "--checkpoint-every", "10", "--out", folder / "early"});
  EXPECT_EQ(poisoned.exit_code, 1) << poisoned.describe();
  EXPECT_TRUE(contains(poisoned.err, "NaN at step 6")) << poisoned.err;
  EXPECT_TRUE(contains(poisoned.err, "No checkpoint had been saved yet")) << poisoned.err;
  EXPECT_FALSE(std::filesystem::exists(folder / "early/checkpoint.safetensors"));
}

TEST_F(PlexusAeTrain, EvalWithoutThePluginNamesThePluginTheModelWasTrainedWith) {
  // Two clean steps: PoisonAfter is an identity for its first 5 calls.
  auto trained = run({"train", "--data", folder / "images", "--model", testing::test_model("tiny_poisoned.json"),
                      "--plugin", PLEXUS_TEST_POISON_PLUGIN, "--patch", "16", "--batch", "1", "--steps", "2",
                      "--device", "cpu", "--out", folder / "with_plugin"});
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  auto eval = run(
      {"eval", "--model", folder / "with_plugin/model.safetensors", "--data", folder / "images", "--device", "cpu"});
  EXPECT_NE(eval.exit_code, 0) << eval.describe();
  const std::string plugin_file = std::filesystem::path(PLEXUS_TEST_POISON_PLUGIN).filename().string();
  EXPECT_TRUE(contains(eval.err, "node 'poison' has type 'PoisonAfter', unknown here; the checkpoint was written "
                                 "with the plugin " +
                                     plugin_file))
      << eval.err;
  EXPECT_TRUE(contains(eval.err, "--plugin")) << eval.err;
}

TEST_F(PlexusAeTrain, TimeLimitFinishesEarlyWithAModel) {
  auto result = run(tiny_run("timed", 10000000, {"--time-limit", "1", "--log-every", "1000000"}));
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_TRUE(contains(result.err, "--time-limit of 1 s reached after step")) << result.err;
  EXPECT_TRUE(std::filesystem::exists(folder / "timed/model.safetensors"));
  auto train = read_metrics(folder / "timed/metrics.jsonl", "train");
  ASSERT_EQ(train.size(), 1u);  // the last step is always logged
  EXPECT_LT(train[0]["step"].get<std::int64_t>(), 10000000);
}

TEST_F(PlexusAeTrain, BundledModelsTakeTrainingSteps) {
  for (const std::string model : {"bls2017", "bmshj2018-factorized"}) {
    auto result = run({"train", "--data", folder / "images", "--model", model, "--patch", "32", "--batch", "1",
                       "--steps", "2", "--device", "cpu", "--out", folder / model});
    EXPECT_EQ(result.exit_code, 0) << result.describe();
    EXPECT_TRUE(std::filesystem::exists(folder / (model + "/model.safetensors"))) << model;
    EXPECT_TRUE(contains(result.err, "stride 16")) << result.err;
  }
}

// Every tensor both files name (optimiser state aside) within `tolerance`.
::testing::AssertionResult close_parameters(const std::string& a_path, const std::string& b_path, double tolerance,
                                            int* compared) {
  TensorFile a = load_safetensors(a_path), b = load_safetensors(b_path);
  *compared = 0;
  for (const auto& [name, tensor] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end() || name.rfind("optimizer/", 0) == 0) continue;
    const std::vector<double> x = tensor.to_values(), y = it->second.to_values();
    if (x.size() != y.size()) return ::testing::AssertionFailure() << name << ": sizes differ";
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::abs(x[i] - y[i]) > tolerance)
        return ::testing::AssertionFailure() << name << "[" << i << "]: " << x[i] << " vs " << y[i];
    ++*compared;
  }
  return ::testing::AssertionSuccess();
}

// `args` with the value after `option` replaced.
std::vector<std::string> with(std::vector<std::string> args, const std::string& option, const std::string& value) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == option) args[i + 1] = value;
  return args;
}

TEST_F(PlexusAeTrain, InitFromStartsFromAnotherModelsWeights) {
  ASSERT_EQ(run(tiny_run("source", 20)).exit_code, 0);
  // One update at a negligible learning rate, from another seed: the weights are the source's.
  auto result =
      run(with(with(tiny_run("tuned", 1, {"--init-from", folder / "source/model.safetensors"}), "--seed", "9"), "--lr",
               "1e-12"));
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_TRUE(contains(result.err, "tensor(s) loaded")) << result.err;
  EXPECT_FALSE(contains(result.err, "kept as initialised")) << result.err;
  int compared = 0;
  EXPECT_TRUE(
      close_parameters(folder / "source/model.safetensors", folder / "tuned/model.safetensors", 1e-6, &compared));
  EXPECT_GE(compared, 10);
  // Without --init-from, seed 9 starts elsewhere.
  ASSERT_EQ(run(with(with(tiny_run("scratch", 1), "--seed", "9"), "--lr", "1e-12")).exit_code, 0);
  EXPECT_FALSE(
      close_parameters(folder / "source/model.safetensors", folder / "scratch/model.safetensors", 1e-6, &compared));
}

TEST_F(PlexusAeTrain, InitFromLowersTheDefaultLearningRateOnly) {
  ASSERT_EQ(run(tiny_run("source", 2)).exit_code, 0);
  // tiny_run's arguments without their --lr, so that the default applies.
  std::vector<std::string> args = tiny_run("tuned", 2, {"--init-from", folder / "source/model.safetensors"});
  const auto lr = std::find(args.begin(), args.end(), "--lr");
  ASSERT_NE(lr, args.end());
  args.erase(lr, lr + 2);
  auto tuned = run(args);
  ASSERT_EQ(tuned.exit_code, 0) << tuned.describe();
  EXPECT_TRUE(contains(tuned.err, "--init-from: learning rate 1e-05, a tenth of a new run's")) << tuned.err;
  const auto tuned_lines = read_metrics(folder / "tuned/metrics.jsonl", "train");
  ASSERT_FALSE(tuned_lines.empty());
  for (const auto& line : tuned_lines) EXPECT_DOUBLE_EQ(line.at("lr").get<double>(), 1e-5);
  // A given --lr (tiny_run's 0.005) is kept.
  auto chosen = run(tiny_run("chosen", 2, {"--init-from", folder / "source/model.safetensors"}));
  ASSERT_EQ(chosen.exit_code, 0) << chosen.describe();
  EXPECT_FALSE(contains(chosen.err, "a tenth of a new run's")) << chosen.err;
  const auto chosen_lines = read_metrics(folder / "chosen/metrics.jsonl", "train");
  ASSERT_FALSE(chosen_lines.empty());
  for (const auto& line : chosen_lines) EXPECT_DOUBLE_EQ(line.at("lr").get<double>(), 0.005);
}

TEST_F(PlexusAeTrain, InitFromListsWhatTheFileLacks) {
  ASSERT_EQ(run(tiny_run("source", 2)).exit_code, 0);
  TensorFile file = load_safetensors(folder / "source/model.safetensors");
  file.tensors.erase("g_s1.bias");
  file.tensors.erase("g_a0_gdn.beta");
  save_safetensors(folder / "partial.safetensors", file);
  auto result = run(tiny_run("tuned", 1, {"--init-from", folder / "partial.safetensors"}));
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_TRUE(contains(result.err, "not in the file, kept as initialised: g_a0_gdn.beta, g_s1.bias")) << result.err;
}

TEST_F(PlexusAeTrain, InitFromRefusesAShapeMismatchByName) {
  ASSERT_EQ(run(tiny_run("source", 2)).exit_code, 0);
  std::ifstream in(testing::test_model("tiny.json"));
  std::string spec((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // g_s0 with 6 output channels (and IGDN and g_s1 follow): other shapes.
  const std::string from = R"("out_channels": 8, "kernel": 5, "stride": 2, "padding": 2, "output_padding": 1)";
  ASSERT_NE(spec.find(from), std::string::npos);
  spec.replace(spec.find(from), from.size(),
               R"("out_channels": 6, "kernel": 5, "stride": 2, "padding": 2, "output_padding": 1)");
  std::ofstream(folder / "wider.json") << spec;
  auto result = run(with(tiny_run("tuned", 1, {"--init-from", folder / "source/model.safetensors"}), "--model",
                         folder / "wider.json"));
  EXPECT_EQ(result.exit_code, 1) << result.describe();
  EXPECT_TRUE(contains(result.err, "tensor 'g_s0.bias' is [8] in the file but [6] in the model")) << result.err;
  EXPECT_FALSE(std::filesystem::exists(folder / "tuned/model.safetensors"));
}

TEST_F(PlexusAeTrain, InitFromAndResumeExcludeEachOther) {
  ASSERT_EQ(run(tiny_run("source", 2)).exit_code, 0);
  auto result = run(tiny_run("source", 4, {"--resume", "--init-from", folder / "source/model.safetensors"}));
  EXPECT_EQ(result.exit_code, 1) << result.describe();
  EXPECT_TRUE(contains(result.err, "give one of them")) << result.err;
  auto missing = run(tiny_run("other", 1, {"--init-from", folder / "no-such.safetensors"}));
  EXPECT_EQ(missing.exit_code, 1) << missing.describe();
  EXPECT_TRUE(contains(missing.err, "no-such.safetensors")) << missing.err;
}

}  // namespace
}  // namespace plexus
