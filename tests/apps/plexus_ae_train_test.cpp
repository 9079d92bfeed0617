// plexus-ae train end to end on the CPU, with a tiny model (tests/apps/
// models/tiny.json, N=8, stride 4) on tiny patches: the loss falls, resuming
// is bit-identical to not stopping (after --resume and after Ctrl-C), a NaN
// loss keeps the last good checkpoint, metrics are logged, both bundled
// models take training steps, and the spec's "loss" section (MS-SSIM
// training of a bundled model, whose eval reports MS-SSIM of the decoded
// files; defaults; bad sections refused by name).
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli_runner.h"
#include "apps/metrics_log_reader.h"
#include "apps/same_tensors.h"
#include "plexus/builtin_layers.h"
#include "plexus/checkpoint.h"
#include "plexus/context.h"
#include "plexus/testing/gtest_helpers.h"

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

// MS-SSIM of two 8-bit images by the MSSSIM layer (tested against its
// definition in tests/layers/ms_ssim_test.cpp), on the CPU in f64.
double layer_ms_ssim(const data::Image& a, const data::Image& b) {
  const Registry registry = builtin_registry();
  auto layer = registry.create("MSSSIM", "ms_ssim", nlohmann::json::object());
  const Shape shape{1, 3, a.height, a.width};
  const auto f64 = [&](const data::Image& image) {
    return Tensor::from_values(data::image_to_tensor(image).to_values(), shape, DType::f64);
  };
  Tensor x = f64(a), y = f64(b), value(Shape{}, DType::f64);
  Context ctx;
  layer->forward(ctx, {&x, &y}, {&value});
  return value.to_values().at(0);
}

// CompressAI's MS-SSIM recipe on a bundled model: loss = lambda (1 - MS-SSIM) + bpp.
TEST_F(PlexusAeTrain, MsSsimLossTrainsABundledModelAndEvalReportsItFromTheFiles) {
  testing::save_png(folder / "large/a.png", testing::position_image(200, 180));
  auto trained = run({"train",
                      "--data",
                      folder / "large",
                      "--val",
                      folder / "large",
                      "--model",
                      "bmshj2018-factorized",
                      "--distortion",
                      "ms_ssim",
                      "--lambda",
                      "8.73",
                      "--patch",
                      "176",
                      "--batch",
                      "1",
                      "--steps",
                      "4",
                      "--log-every",
                      "2",
                      "--device",
                      "cpu",
                      "--out",
                      folder / "ms"});
  ASSERT_EQ(trained.exit_code, 0) << trained.describe();
  EXPECT_TRUE(contains(trained.err, "lambda 8.73 on (1 - MS-SSIM)")) << trained.err;
  auto train = read_metrics(folder / "ms/metrics.jsonl", "train");
  ASSERT_EQ(train.size(), 2u);
  for (const nlohmann::json& entry : train) {
    ASSERT_TRUE(entry["ms_ssim"].is_number()) << entry.dump();
    const double ms_ssim = entry["ms_ssim"], bpp = entry["bpp"], loss = entry["loss"];
    EXPECT_GT(ms_ssim, 0.0);
    EXPECT_LE(ms_ssim, 1.0);
    EXPECT_NEAR(loss, 8.73 * (1 - ms_ssim) + bpp, 1e-4 * loss) << entry.dump();
    EXPECT_TRUE(entry["psnr"].is_number()) << entry.dump();  // from "mse", recorded though not trained on
  }
  auto val = read_metrics(folder / "ms/metrics.jsonl", "val");
  ASSERT_EQ(val.size(), 1u);
  ASSERT_TRUE(val[0]["ms_ssim"].is_number()) << val[0].dump();
  EXPECT_NEAR(val[0]["loss"].get<double>(), 8.73 * (1 - val[0]["ms_ssim"].get<double>()) + val[0]["bpp"].get<double>(),
              1e-9);
  // The model file records the spec with its loss, not the node training added.
  const ModelSpec spec = spec_from_checkpoint(load_safetensors(folder / "ms/model.safetensors"), "model");
  EXPECT_EQ(spec.loss["distortion"][0]["type"], "ms_ssim") << spec.loss.dump();
  for (const NodeSpec& node : spec.nodes) EXPECT_NE(node.type, "MSSSIM") << node.name;

  auto eval = run({"eval", "--model", folder / "ms/model.safetensors", "--data", folder / "large", "--out",
                   folder / "ms-eval", "--device", "cpu"});
  ASSERT_EQ(eval.exit_code, 0) << eval.describe();
  EXPECT_TRUE(contains(eval.out, "MS-SSIM")) << eval.out;
  EXPECT_TRUE(contains(eval.out, "file MS-SSIM")) << eval.out;
  const auto report = nlohmann::json::parse(testing::read_bytes(folder / "ms-eval/eval.json"));
  const nlohmann::json& image = report["images"].at(0);
  const data::Image original = testing::position_image(200, 180);
  const double expected = layer_ms_ssim(data::read_image(folder / "ms-eval/a.png"), original);
  ASSERT_TRUE(image["ms_ssim"].is_number()) << image.dump();
  EXPECT_NEAR(image["ms_ssim"].get<double>(), expected, 1e-9);
  EXPECT_NEAR(report["mean_ms_ssim"].get<double>(), expected, 1e-9);
  // The real file, compressed and decoded: its own MS-SSIM, a value in (0, 1].
  ASSERT_TRUE(image["file"]["ms_ssim"].is_number()) << image.dump();
  EXPECT_GT(image["file"]["ms_ssim"].get<double>(), 0.0);
  EXPECT_LE(image["file"]["ms_ssim"].get<double>(), 1.0);
}

// On a GPU: MS-SSIM training on CUDA, its step recorded into a CUDA graph
// (MSSSIM is capturable) and launched eagerly, logs the same losses (the two
// devices draw different noise, so the CPU's are not the reference).
TEST_F(PlexusAeTrain, MsSsimTrainingOnCudaRecordsItsStepInACudaGraph) {
  if (!cuda_available()) GTEST_SKIP() << testing::kNoGpuReason;
  testing::save_png(folder / "large/a.png", testing::position_image(200, 180));
  std::map<std::string, std::vector<nlohmann::json>> logs;
  for (const std::string graph : {"on", "off"}) {
    auto result = run({"train",
                       "--data",
                       folder / "large",
                       "--model",
                       testing::test_model("tiny.json"),
                       "--distortion",
                       "ms_ssim",
                       "--lambda",
                       "8.73",
                       "--patch",
                       "164",
                       "--batch",
                       "2",
                       "--steps",
                       "6",
                       "--log-every",
                       "2",
                       "--lr",
                       "0.005",
                       "--seed",
                       "3",
                       "--device",
                       "cuda",
                       "--cuda-graph",
                       graph,
                       "--out",
                       folder / ("ms-" + graph)});
    ASSERT_EQ(result.exit_code, 0) << result.describe();
    if (graph == "on") EXPECT_TRUE(contains(result.err, "CUDA graph on")) << result.err;
    logs[graph] = read_metrics(folder / ("ms-" + graph + "/metrics.jsonl"), "train");
  }
  ASSERT_EQ(logs["on"].size(), 3u);
  ASSERT_EQ(logs["off"].size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const nlohmann::json& on = logs["on"][i];
    const double loss = on["loss"], ms_ssim = on["ms_ssim"], bpp = on["bpp"];
    // A tiny untrained model's MS-SSIM of this image is near zero, and the layer clamps each scale's
    // contrast-structure term at zero (as CompressAI does), so a line may log exactly 0.
    EXPECT_GE(ms_ssim, 0.0);
    EXPECT_LE(ms_ssim, 1.0);
    EXPECT_NEAR(loss, 8.73 * (1 - ms_ssim) + bpp, 1e-4 * loss) << on.dump();
    for (const char* key : {"loss", "ms_ssim", "bpp"})
      EXPECT_NEAR(on[key].get<double>(), logs["off"][i][key].get<double>(), 1e-4 * std::abs(on[key].get<double>()))
          << key << " at log line " << i;
  }
}

// tiny.json with `loss` as its "loss" section, written to <scratch>/<name>.json.
std::string tiny_with_loss(const ScratchFolder& folder, const std::string& name, const nlohmann::json& loss) {
  nlohmann::json spec = nlohmann::json::parse(testing::read_bytes(testing::test_model("tiny.json")));
  spec["loss"] = loss;
  const std::string path = folder / (name + ".json");
  testing::write_bytes(path, spec.dump());
  return path;
}

TEST_F(PlexusAeTrain, TheDefaultLossSectionTrainsLikeNoSection) {
  ASSERT_EQ(run(tiny_run("plain", 6, {"--lambda", "0.01"})).exit_code, 0);
  const std::string spec = tiny_with_loss(folder, "explicit",
                                          {{"distortion", {{{"type", "mse"}, {"weight", 1}}}},
                                           {"rate", {{{"blob", "bpp"}, {"weight", 1}}}},
                                           {"lambda", 0.01}});
  auto explicit_run = run(with(tiny_run("explicit", 6), "--model", spec));
  ASSERT_EQ(explicit_run.exit_code, 0) << explicit_run.describe();
  auto plain = read_metrics(folder / "plain/metrics.jsonl", "train");
  auto same = read_metrics(folder / "explicit/metrics.jsonl", "train");
  ASSERT_EQ(plain.size(), same.size());
  ASSERT_FALSE(plain.empty());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(plain[i]["loss"], same[i]["loss"]) << i;
    EXPECT_EQ(plain[i]["mse"], same[i]["mse"]) << i;
    EXPECT_TRUE(plain[i]["ms_ssim"].is_null()) << plain[i].dump();  // 16-pixel patches: not measured
  }
}

// A loss without MS-SSIM still logs it, for the last step's patches when they are large enough.
TEST_F(PlexusAeTrain, MseTrainingLogsTheMsSsimOfItsPatches) {
  testing::save_png(folder / "large/a.png", testing::position_image(200, 180));
  auto result = run({"train", "--data", folder / "large", "--model", testing::test_model("tiny.json"), "--patch", "164",
                     "--batch", "2", "--steps", "4", "--log-every", "2", "--lr", "0.005", "--device", "cpu", "--out",
                     folder / "mse"});
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_TRUE(contains(result.err, "MS-SSIM ")) << result.err;  // the progress line
  EXPECT_TRUE(contains(result.out, "of the last logged batch")) << result.out;
  auto train = read_metrics(folder / "mse/metrics.jsonl", "train");
  ASSERT_EQ(train.size(), 2u);
  for (const nlohmann::json& entry : train) {
    ASSERT_TRUE(entry["ms_ssim"].is_number()) << entry.dump();
    EXPECT_GE(entry["ms_ssim"].get<double>(), 0.0);
    EXPECT_LE(entry["ms_ssim"].get<double>(), 1.0);
    // The loss is still lambda * 255^2 * mse + bpp, MS-SSIM no part of it.
    const double loss = entry["loss"], mse = entry["mse"], bpp = entry["bpp"];
    EXPECT_NEAR(loss, 0.01 * 255 * 255 * mse + bpp, 1e-5 * loss) << entry.dump();
  }
}

TEST_F(PlexusAeTrain, TheSpecsLambdaIsTheDefaultAndTheCommandLineWins) {
  const std::string spec = tiny_with_loss(folder, "lambda", {{"lambda", 0.05}});
  for (const auto& [out, extra, lambda] : std::vector<std::tuple<std::string, std::vector<std::string>, double>>{
           {"from-spec", {}, 0.05}, {"from-cli", {"--lambda", "0.002"}, 0.002}}) {
    auto result = run(with(tiny_run(out, 4, extra), "--model", spec));
    ASSERT_EQ(result.exit_code, 0) << result.describe();
    for (const nlohmann::json& entry : read_metrics(folder / (out + "/metrics.jsonl"), "train")) {
      const double loss = entry["loss"], mse = entry["mse"], bpp = entry["bpp"];
      EXPECT_NEAR(loss, lambda * 255 * 255 * mse + bpp, 1e-5 * loss) << out << ": " << entry.dump();
    }
  }
}

TEST_F(PlexusAeTrain, BadLossSectionsAreRefusedByName) {
  const std::vector<std::pair<nlohmann::json, std::string>> cases{
      {3, "at /loss: the loss must be an object, got 3"},
      {{{"lamda", 1}}, "at /loss: unknown key 'lamda' (expected distortion, rate, lambda, lambdas)"},
      {{{"distortion", {{{"type", "ssim"}}}}},
       "at /loss/distortion/0/type: unknown distortion \"ssim\" (expected \"mse\" or \"ms_ssim\")"},
      {{{"distortion", {{{"type", "mse"}, {"weigth", 1}}}}}, "at /loss/distortion/0: unknown key 'weigth'"},
      {{{"distortion", {{{"type", "mse"}, {"weight", "1"}}}}},
       "at /loss/distortion/0/weight must be a number > 0, got \"1\""},
      {{{"distortion", nlohmann::json::array()}}, "at /loss/distortion is empty"},
      {{{"rate", {{{"blob", "bits"}}}}}, "at /loss/rate/0/blob: no node produces 'bits'"},
      {{{"lambda", -1}}, "at /loss/lambda must be a number > 0, got -1"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string spec = tiny_with_loss(folder, "bad" + std::to_string(i), cases[i].first);
    auto result = run(with(tiny_run("bad" + std::to_string(i), 1), "--model", spec));
    EXPECT_NE(result.exit_code, 0) << result.describe();
    EXPECT_TRUE(contains(result.err, spec + ": " + cases[i].second)) << result.err;
  }
  auto unknown = run(tiny_run("unknown", 1, {"--distortion", "ssim"}));
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_TRUE(contains(unknown.err, "--distortion must be mse or ms_ssim, got 'ssim'")) << unknown.err;
  auto small = run(tiny_run("small", 1, {"--distortion", "ms_ssim"}));
  EXPECT_NE(small.exit_code, 0);
  EXPECT_TRUE(contains(small.err, "--patch 16 is too small for the \"ms_ssim\" distortion")) << small.err;
  EXPECT_TRUE(contains(small.err, "try --patch 164")) << small.err;
  auto variable_rate = run({"train", "--data", folder / "images", "--model", "mbt2018-mean-vr", "--distortion",
                            "ms_ssim", "--patch", "192", "--device", "cpu", "--out", folder / "vr"});
  EXPECT_NE(variable_rate.exit_code, 0);
  EXPECT_TRUE(contains(variable_rate.err, "mbt2018-mean-vr.json: at /loss: an \"ms_ssim\" distortion weights every "
                                          "image alike; a variable-rate model (it reads \"level\") trains with "
                                          "\"mse\" alone"))
      << variable_rate.err;
}

}  // namespace
}  // namespace plexus
