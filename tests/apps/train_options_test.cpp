// The table of `plexus-ae train`'s options (apps/autoencoder/train_options.cpp)
// against the checkpoints plexus-ae has always written: their settings,
// written out here by hand with the keys and JSON types of every earlier
// checkpoint, resume with every option restored, and bad saved values are
// refused naming the key. And plexus-ae's progress-line arithmetic
// (apps/autoencoder/train_progress.cpp, and console.cpp's line for batches of
// files), with values worked out by hand; the schedule and the clock are the
// trainer's (tests/framework/train/).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "console.h"
#include "data/data_test_support.h"
#include "plexus/error.h"
#include "plexus/testing/gtest_helpers.h"
#include "plexus/train/option_table_cli.h"
#include "train_options.h"
#include "train_progress.h"

namespace plexus::ae {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// What an earlier plexus-ae train wrote under "plexus_ae.train": every value
// differs from the default, so a restored option cannot pass by chance.
constexpr const char* kEarlierSettings = R"({
  "data": "/data/bsds500", "val": "/data/kodak", "model": "bmshj2018-factorized",
  "lambda": 0.0067, "lambdas": [0.0018, 0.0035, 0.0067],
  "steps": 200000, "batch": 16, "patch": 128, "lr": 0.0003, "seed": 18446744073709551615,
  "checkpoint_every": 2500, "log_every": 50, "val_every": 10000, "val_images": 12, "stride": 16,
  "clip_grad_norm": 0.5, "lr_schedule": "step", "lr_decay": 0.25, "lr_step_every": 40000,
  "lr_patience": 7, "lr_final_fraction": 0.3, "min_lr": 2e-7
})";

TensorFile earlier_checkpoint(const std::string& settings = kEarlierSettings) {
  TensorFile file;
  file.metadata["plexus_ae.train"] = settings;
  return file;
}

nlohmann::json read_settings(const TensorFile& file) {
  return train::settings_from_checkpoint(file, "run/checkpoint.safetensors", kTrainRunKeys,
                                         train_option_table("bls2017"));
}

TEST(TrainOptions, AnEarlierCheckpointResumesWithEveryOptionRestored) {
  const TrainOptionTable table = train_option_table("bls2017");
  TrainOptions o;
  o.out = "runs/resumed";
  table.restore(o, read_settings(earlier_checkpoint()), {"out", "resume"});
  EXPECT_EQ(o.data, "/data/bsds500");
  EXPECT_EQ(o.val, "/data/kodak");
  EXPECT_EQ(o.model, "bmshj2018-factorized");
  EXPECT_EQ(o.lambda, 0.0067);
  EXPECT_EQ(o.lambdas, (std::vector<double>{0.0018, 0.0035, 0.0067}));
  EXPECT_EQ(o.steps, 200000);
  EXPECT_EQ(o.batch, 16);
  EXPECT_EQ(o.patch, 128);
  EXPECT_EQ(o.lr, 0.0003);
  EXPECT_EQ(o.seed, 18446744073709551615ULL);
  EXPECT_EQ(o.checkpoint_every, 2500);
  EXPECT_EQ(o.log_every, 50);
  EXPECT_EQ(o.val_every, 10000);
  EXPECT_EQ(o.val_images, 12);
  EXPECT_EQ(o.clip_grad_norm, 0.5);
  EXPECT_EQ(o.lr_schedule, "step");
  EXPECT_EQ(o.lr_decay, 0.25);
  EXPECT_EQ(o.lr_step_every, 40000);
  EXPECT_EQ(o.lr_patience, 7);
  EXPECT_EQ(o.lr_final_fraction, 0.3);
  EXPECT_EQ(o.min_lr, 2e-7);
  EXPECT_EQ(o.out, "runs/resumed");  // not saved: the command line's
  EXPECT_NO_THROW(table.validate(o));
}

// Options given again keep the command line's value; a changed one that
// changes the run is warned about, one that may change (--steps) is not.
TEST(TrainOptions, OptionsGivenOnResumeWinAndAChangedRunIsWarnedAbout) {
  const TrainOptionTable table = train_option_table("bls2017");
  TrainOptions o;
  o.lr = 1e-3;
  o.steps = 300000;
  testing::LogCapture log;
  table.restore(o, read_settings(earlier_checkpoint()), {"lr", "steps"});
  EXPECT_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.steps, 300000);
  EXPECT_EQ(o.batch, 16);  // not given: restored
  EXPECT_TRUE(contains(log.text(), "--lr 0.001 differs from the checkpoint's 0.0003; the resumed run will not match"))
      << log.text();
  EXPECT_FALSE(contains(log.text(), "--steps")) << log.text();
}

// The settings a new checkpoint keeps: the keys and JSON types earlier checkpoints have, and no other.
TEST(TrainOptions, SavedSettingsHaveTheKeysOfEarlierCheckpoints) {
  const TrainOptionTable table = train_option_table("bls2017");
  TrainOptions o;
  table.restore(o, nlohmann::json::parse(kEarlierSettings), {});
  const nlohmann::json saved = train_settings(table, o, 16);
  EXPECT_EQ(saved, nlohmann::json::parse(kEarlierSettings));
  EXPECT_TRUE(saved.at("seed").is_number_unsigned());
  EXPECT_TRUE(saved.at("steps").is_number_integer());
  EXPECT_TRUE(saved.at("lr").is_number_float());
}

TEST(TrainOptions, BadSavedValuesAreRefusedNamingTheKey) {
  const std::string source = "run/checkpoint.safetensors (training settings): at /";
  auto refused = [&](const char* key, const nlohmann::json& value, const std::string& message) {
    nlohmann::json settings = nlohmann::json::parse(kEarlierSettings);
    settings[key] = value;
    plexus::testing::expect_error<IoError>([&] { read_settings(earlier_checkpoint(settings.dump())); },
                                           {source + key + ": must be " + message});
  };
  refused("batch", 1000000000000LL, "an integer in [1, 65536], got 1000000000000");
  refused("lambda", "high", "a finite number > 0, got \"high\"");
  refused("lambdas", {0.01, -1}, "a list of at most 1000 finite numbers > 0, got [0.01,-1]");
  refused("lr", 0, "a finite number > 0, got 0");
  refused("steps", 0, "an integer in [1, 1125899906842624], got 0");
  refused("patch", 65537, "an integer in [1, 65536], got 65537");
  refused("seed", -1, "an integer in [0, 2^64 - 1], got -1");
  refused("checkpoint_every", -1, "an integer in [0, 1125899906842624], got -1");
  refused("log_every", 0, "an integer in [1, 1125899906842624], got 0");
  refused("val_every", 1.5, "an integer in [1, 1125899906842624], got 1.5");
  refused("val_images", -1, "an integer in [0, 2147483647], got -1");
  refused("data", 3, "a string, got 3");
  refused("model", nullptr, "a string, got null");
  refused("lr_decay", 1.5, "a number in (0, 1), got 1.5");
  refused("lr_schedule", 2, "a string, got 2");
  refused("min_lr", -1, "a finite number >= 0, got -1");
}

TEST(TrainOptions, ACheckpointWithoutSettingsIsNamed) {
  plexus::testing::expect_error<IoError>(
      [] { read_settings(TensorFile{}); },
      {"'run/checkpoint.safetensors' carries no plexus-ae training settings; was it written by plexus-ae train?"});
  plexus::testing::expect_error<IoError>([] { read_settings(earlier_checkpoint("[1, 2]")); },
                                         {"carries unreadable plexus-ae training settings: [1, 2]"});
}

// The command line the table declares: defaults as in TrainOptions, values
// parsed into the struct, and the given options' keys.
TEST(TrainOptions, TheCommandLineSetsTheStructAndNamesWhatWasGiven) {
  const TrainOptionTable table = train_option_table("bls2017");
  TrainOptions o;
  CLI::App app;
  app.option_defaults()->always_capture_default();
  train::add_options(app, table, o);
  app.parse("--data a,b --lr 0.002 --resume --lr-patience 3 --cuda-graph off --lambdas 0.1,0.2", false);
  EXPECT_EQ(o.data, "a,b");
  EXPECT_EQ(o.lr, 0.002);
  EXPECT_TRUE(o.resume);
  EXPECT_EQ(o.lr_patience, 3);
  EXPECT_FALSE(o.cuda_graph);
  EXPECT_EQ(o.lambdas, (std::vector<double>{0.1, 0.2}));
  EXPECT_EQ(o.batch, TrainOptions{}.batch);
  EXPECT_EQ(train::given_options(app),
            (std::set<std::string>{"data", "lr", "resume", "lr_patience", "cuda_graph", "lambdas"}));
  EXPECT_EQ(app.get_option("--steps")->get_default_str(), "100000");
  EXPECT_EQ(app.get_option("--cuda-graph")->get_default_str(), "on");
  EXPECT_TRUE(contains(app.help(), "--model NAME|FILE")) << app.help();
  EXPECT_TRUE(contains(app.help(), "a bundled model (bls2017) or a JSON model spec file")) << app.help();
  EXPECT_THROW(app.parse("--precision fp16", false), CLI::ValidationError);
}

// validate() gives the messages the command line always gave.
TEST(TrainOptions, ValuesOutOfRangeAreRefusedNamingTheOption) {
  const TrainOptionTable table = train_option_table("bls2017");
  auto refused = [&](const std::function<void(TrainOptions&)>& edit, const std::string& message) {
    TrainOptions o;
    edit(o);
    plexus::testing::expect_error<ConfigError>([&] { table.validate(o); }, {message});
  };
  refused([](TrainOptions& o) { o.batch = 0; }, "--batch must be in [1, 65536], got 0");
  refused([](TrainOptions& o) { o.patch = 70000; }, "--patch must be in [1, 65536], got 70000");
  refused([](TrainOptions& o) { o.lambda = -1; }, "--lambda must be > 0, got -1.000000");
  refused([](TrainOptions& o) { o.lr = 0; }, "--lr must be > 0, got 0.000000");
  refused([](TrainOptions& o) { o.steps = 0; }, "--steps must be in [1, 1125899906842624], got 0");
  refused([](TrainOptions& o) { o.checkpoint_every = -1; }, "--checkpoint-every must be >= 0, got -1");
  refused([](TrainOptions& o) { o.log_every = 0; }, "--log-every must be >= 1, got 0");
  refused([](TrainOptions& o) { o.threads = 100000; }, "--threads must be in [0, 256], got 100000");
  refused([](TrainOptions& o) { o.time_limit = -1; }, "--time-limit must be >= 0 seconds, got -1.000000");
  refused([](TrainOptions& o) { o.clip_grad_norm = -1; }, "--clip-grad-norm must be >= 0 (0: no clipping), got");
  refused([](TrainOptions& o) { o.replica_check_every = -1; },
          "--replica-check-every must be >= 0 (0: only at the end), got -1");
  refused([](TrainOptions& o) { o.lr_decay = 1; }, "--lr-decay must be in (0, 1), got 1.000000");
  TrainOptions o;
  o.time_limit = HUGE_VAL;  // no limit in practice: accepted, as before
  EXPECT_NO_THROW(table.validate(o));
}

}  // namespace
}  // namespace plexus::ae

namespace plexus::ae {
namespace {

TEST(TrainProgress, PsnrOfAnMseOfUnitValues) {
  EXPECT_NEAR(psnr_of_mse(1.0), 0.0, 1e-12);
  EXPECT_NEAR(psnr_of_mse(0.01), 20.0, 1e-12);
  EXPECT_NEAR(psnr_of_mse(2.5e-5), 46.020599913279625, 1e-9);  // 40 + 10 log10(4)
  EXPECT_NEAR(psnr_of_mse(0.0), 120.0, 1e-12);                 // floored at 1e-12
}

TEST(TrainProgress, SmoothedStatsAreTheMeanAtFirstThenAMovingAverage) {
  SmoothedStats s;
  s.add(4, 0.1, 1, 0.9);
  s.add(2, 0.3, 3, 0.7);
  EXPECT_DOUBLE_EQ(s.loss, 3.0);
  EXPECT_DOUBLE_EQ(s.mse, 0.2);
  EXPECT_DOUBLE_EQ(s.ms_ssim, 0.8);
  for (int i = 0; i < 1000; ++i) s.add(7, 0.5, 2, 0.95);
  EXPECT_NEAR(s.loss, 7.0, 1e-6);  // the early values have decayed away
  EXPECT_NEAR(s.ms_ssim, 0.95, 1e-6);
  SmoothedStats unmeasured;
  unmeasured.add(4, 0.1, 1, std::nan(""));
  EXPECT_TRUE(std::isnan(unmeasured.ms_ssim));  // not shown
}

TEST(FileProgress, LineCountsFromOneAndHasNoEtaBeforeAFileIsDone) {
  EXPECT_EQ(file_progress_line(0, 24, "kodim01.png", 0.4, 0, 1000), "[1/24] kodim01.png  0s");
}

TEST(FileProgress, EtaScalesTheTimeSoFarByTheBytesLeft) {
  // 30 s for 250 of 1000 bytes: 750 bytes left at the same rate take 90 s.
  EXPECT_EQ(file_progress_line(2, 4, "c.png", 30, 250, 1000), "[3/4] c.png  30s, ETA 1m30s");
  // The last file: nothing left after it is done, so no ETA once all bytes are.
  EXPECT_EQ(file_progress_line(3, 4, "d.png", 65, 1000, 1000), "[4/4] d.png  1m05s");
}

}  // namespace
}  // namespace plexus::ae
