// The trainer's loop (plexus/train/trainer.h) on the CPU with a toy net (a
// 1x1 convolution fitting its input under MSELoss) and a command that
// records what the loop asks of it: when it logs, validates and saves, how
// the schedule follows the validation losses, the time limit, and a
// diverging run.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "plexus/builtin_layers.h"
#include "plexus/data/batch_loader.h"
#include "plexus/data/image.h"
#include "plexus/data/image_folder.h"
#include "plexus/data/patch_sampler.h"
#include "plexus/train/exit_codes.h"
#include "plexus/train/trainer.h"

namespace plexus::train {
namespace {

namespace fs = std::filesystem;

constexpr int kBatch = 2, kPatch = 8;

// Two 24x20 images of a colour ramp, in a folder of their own.
class Images {
 public:
  Images() : folder_(fs::temp_directory_path() / ("plexus-trainer-test-" + std::to_string(::getpid()))) {
    fs::create_directories(folder_);
    for (int k = 0; k < 2; ++k) {
      data::Image image(24, 20);
      for (int y = 0; y < image.height; ++y)
        for (int x = 0; x < image.width; ++x)
          for (int c = 0; c < 3; ++c) image.at(y, x, c) = static_cast<std::uint8_t>((x * 9 + y * 5 + c * 40 + k) % 256);
      data::write_png((folder_ / ("image" + std::to_string(k) + ".png")).string(), image);
    }
  }
  ~Images() {
    std::error_code ignored;
    fs::remove_all(folder_, ignored);
  }
  std::string folder() const { return folder_.string(); }

 private:
  fs::path folder_;
};

ModelSpec toy_spec() {
  ModelSpec spec;
  spec.name = "toy";
  spec.add_input("image")
      .add_node({"conv", "Conv2d", {"image"}, {"y"}, {{"out_channels", 3}, {"kernel", 1}}})
      .add_node({"mse", "MSELoss", {"y", "image"}, {"loss"}, {}});
  return spec;
}

// Records the step of every call.
class RecordingCommand : public TrainerCommand {
 public:
  explicit RecordingCommand(const std::int64_t& step) : step_(step) {}
  void on_step_values(const TrainingWindow& now) override {
    values.push_back(step_);
    EXPECT_TRUE(std::isfinite(now.last_loss));
  }
  void on_pace(std::int64_t step, double seconds_per_step) override {
    paces.push_back(step);
    EXPECT_GE(seconds_per_step, 0.0);
  }
  void on_log(const TrainingWindow& window, double, double) override {
    logs.push_back(step_);
    logged_steps += window.steps;
    EXPECT_EQ(window.terms.size(), 1u);
  }
  void after_step() override { ++after_steps; }
  bool validates() const override { return true; }
  double validate() override {
    validations.push_back(step_);
    return validation_losses.at(validations.size() - 1);
  }
  void write_checkpoint() override { checkpoints.push_back(step_); }
  std::string checkpoint_path() const override { return "toy/checkpoint.safetensors"; }
  void on_diverged(const Divergence& divergence, const std::string& kept) override {
    diverged_at = divergence.step;
    diverged_kept = kept;
  }
  void on_stopped(int) override { ++stops; }
  void on_finished() override { ++finishes; }

  std::vector<std::int64_t> values, paces, logs, validations, checkpoints;
  std::vector<double> validation_losses{1.0, 2.0, 3.0, 4.0};
  std::int64_t logged_steps = 0, after_steps = 0, diverged_at = -1;
  std::string diverged_kept;
  int stops = 0, finishes = 0;

 private:
  const std::int64_t& step_;
};

struct ToyRun {
  explicit ToyRun(const TrainerOptions& o)
      : net(toy_spec(), registry, {{"image", {kBatch, 3, kPatch, kPatch}}}, DType::f32, Device::cpu(), 5),
        adam(o.lr),
        schedule(o),
        images(files.folder()),
        loader(images, data::PatchSampler(o.seed, kBatch, kPatch), 0, 0),
        command(step) {}

  int train(const TrainerOptions& o) {
    Trainer trainer({net, adam, ctx, schedule, nullptr, nullptr, true, step, std::chrono::steady_clock::now(), false},
                    loader, StepLoss{"image", {{"loss", 1.0}}}, o, command);
    return trainer.train();
  }

  Registry registry = builtin_registry();
  Context ctx;
  Net net;
  Adam adam;
  LrSchedule schedule;
  Images files;
  data::ImageFolder images;
  data::BatchLoader loader;
  std::int64_t step = 0;
  RecordingCommand command;
};

TrainerOptions toy_options() {
  TrainerOptions o;
  o.steps = 7;
  o.batch = kBatch;
  o.lr = 1e-3;
  o.log_every = 3;
  o.val_every = 4;
  o.checkpoint_every = 2;
  o.lr_schedule = "plateau";
  o.lr_patience = 1;
  o.lr_decay = 0.5;
  o.min_lr = 0;
  return o;
}

TEST(Trainer, LogsValidatesAndSavesWhenDueAndAtTheLastStep) {
  const TrainerOptions o = toy_options();
  ToyRun run(o);
  EXPECT_EQ(run.train(o), kExitOk);
  EXPECT_EQ(run.step, 7);
  const std::vector<std::int64_t> every_step{1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(run.command.values, every_step);  // the CPU reads every step's values
  EXPECT_EQ(run.command.paces, every_step);
  EXPECT_EQ(run.command.after_steps, 7);
  EXPECT_EQ(run.command.logs, (std::vector<std::int64_t>{3, 6, 7}));
  EXPECT_EQ(run.command.logged_steps, 7);
  EXPECT_EQ(run.command.validations, (std::vector<std::int64_t>{4, 7}));
  // Periodic checkpoints before the last step, then the final one.
  EXPECT_EQ(run.command.checkpoints, (std::vector<std::int64_t>{2, 4, 6, 7}));
  EXPECT_EQ(run.command.finishes, 1);
  EXPECT_EQ(run.command.stops, 0);
  // The second validation (loss 2 after 1) did not improve: with patience 1 the rate halved.
  EXPECT_DOUBLE_EQ(run.schedule.current_rate(), 5e-4);
  EXPECT_DOUBLE_EQ(run.adam.learning_rate(), 5e-4);
}

TEST(Trainer, TheTimeLimitMakesTheCurrentStepTheLast) {
  TrainerOptions o = toy_options();
  o.steps = 1000;
  o.time_limit = 1e-9;  // seconds: reached by the first step
  ToyRun run(o);
  EXPECT_EQ(run.train(o), kExitOk);
  EXPECT_EQ(run.step, 1);
  EXPECT_EQ(run.command.logs, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(run.command.validations, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(run.command.checkpoints, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(run.command.finishes, 1);
}

// A learning rate of 1e30 sends the weights to about 1e30 in one Adam step,
// so the next step's squared error overflows: the loop stops there without saving.
TEST(Trainer, ADivergingRunStopsAtTheFirstNonFiniteLossWithoutSaving) {
  TrainerOptions o = toy_options();
  o.lr = 1e30;
  o.checkpoint_every = 1000;
  ToyRun run(o);
  EXPECT_EQ(run.train(o), kExitError);
  EXPECT_EQ(run.command.diverged_at, 2);
  EXPECT_EQ(run.command.diverged_kept, "No checkpoint had been saved yet.");
  EXPECT_TRUE(run.command.checkpoints.empty());
  EXPECT_EQ(run.command.finishes, 0);
}

}  // namespace
}  // namespace plexus::train
