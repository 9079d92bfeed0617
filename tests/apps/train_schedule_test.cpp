// plexus-ae's learning-rate schedule and progress arithmetic (apps/autoencoder/
// lr_schedule.cpp, train_progress.cpp), with values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "lr_schedule.h"
#include "plexus/error.h"
#include "run_metadata.h"
#include "train_progress.h"

namespace plexus::ae {
namespace {

TrainOptions schedule_options(const std::string& kind) {
  TrainOptions o;
  o.lr = 1e-3;
  o.lr_schedule = kind;
  o.lr_decay = 0.5;
  o.lr_step_every = 100;
  o.lr_patience = 2;
  o.min_lr = 2e-4;
  return o;
}

TEST(LrSchedule, StepDecaysEveryNStepsDownToTheMinimum) {
  LrSchedule s(schedule_options("step"));
  EXPECT_DOUBLE_EQ(s.rate_for_step(0), 1e-3);
  EXPECT_DOUBLE_EQ(s.rate_for_step(99), 1e-3);
  EXPECT_DOUBLE_EQ(s.rate_for_step(100), 5e-4);
  EXPECT_DOUBLE_EQ(s.rate_for_step(250), 2.5e-4);
  EXPECT_DOUBLE_EQ(s.rate_for_step(300), 2e-4);  // 1.25e-4 is below --min-lr
}

TEST(LrSchedule, PlateauDecaysAfterPatienceValidationsWithoutImprovement) {
  LrSchedule s(schedule_options("plateau"));
  EXPECT_FALSE(s.observe_validation(10.0));
  EXPECT_FALSE(s.observe_validation(9.0));   // better
  EXPECT_FALSE(s.observe_validation(9.5));   // worse: 1 of 2
  EXPECT_TRUE(s.observe_validation(9.2));    // worse again: decay
  EXPECT_DOUBLE_EQ(s.rate_for_step(12345), 5e-4);
  EXPECT_FALSE(s.observe_validation(9.1));   // 1 of 2 again (the count restarted)
  EXPECT_FALSE(s.observe_validation(8.0));   // better: count reset
  EXPECT_DOUBLE_EQ(s.current_rate(), 5e-4);
}

TEST(LrSchedule, StateRoundTripsThroughJson) {
  LrSchedule s(schedule_options("plateau"));
  s.observe_validation(3.0);
  s.observe_validation(4.0);
  s.observe_validation(4.0);  // decay to 5e-4
  s.observe_validation(5.0);  // 1 bad validation pending
  LrSchedule resumed(schedule_options("plateau"));
  resumed.restore(nlohmann::json::parse(s.state().dump()));
  EXPECT_DOUBLE_EQ(resumed.current_rate(), 5e-4);
  EXPECT_TRUE(resumed.observe_validation(3.5)) << "the pending bad validation and the best loss 3.0 were restored";
  EXPECT_DOUBLE_EQ(resumed.current_rate(), 2.5e-4);
}

TEST(LrSchedule, NoneKeepsTheRateAndBadSettingsAreRefused) {
  LrSchedule s(schedule_options("none"));
  for (int i = 0; i < 10; ++i) s.observe_validation(1.0 + i);
  EXPECT_DOUBLE_EQ(s.rate_for_step(100000), 1e-3);
  EXPECT_THROW(LrSchedule(schedule_options("cosine")), ConfigError);
  TrainOptions o = schedule_options("step");
  o.lr_step_every = 0;
  EXPECT_THROW(LrSchedule{o}, ConfigError);
  o = schedule_options("plateau");
  o.lr_decay = 1.0;
  EXPECT_THROW(LrSchedule{o}, ConfigError);
}

TEST(LrSchedule, FinalDecaysOnceForTheLastFractionOfStepsOrTime) {
  TrainOptions o = schedule_options("final");
  o.steps = 1000;
  o.lr_decay = 0.1;
  o.min_lr = 1e-6;
  o.lr_final_fraction = 0.2;
  LrSchedule by_steps(o);
  EXPECT_DOUBLE_EQ(by_steps.rate_for_step(0), 1e-3);
  EXPECT_DOUBLE_EQ(by_steps.rate_for_step(799), 1e-3);
  EXPECT_DOUBLE_EQ(by_steps.rate_for_step(800), 1e-4);   // the last 200 of 1000 steps
  EXPECT_DOUBLE_EQ(by_steps.rate_for_step(999), 1e-4);
  o.time_limit = 100;  // seconds: whichever of steps and time is further along decides
  LrSchedule by_time(o);
  EXPECT_DOUBLE_EQ(by_time.rate_for_step(10, 79.9), 1e-3);
  EXPECT_DOUBLE_EQ(by_time.rate_for_step(10, 80.0), 1e-4);  // 80 s of 100: decayed after 10 steps of 1000
  EXPECT_DOUBLE_EQ(by_time.rate_for_step(900, 1.0), 1e-4);  // the steps are further along
  o.min_lr = 5e-4;
  EXPECT_DOUBLE_EQ(LrSchedule(o).rate_for_step(999), 5e-4);  // never below --min-lr
  o.lr_final_fraction = 1.0;
  EXPECT_THROW(LrSchedule{o}, ConfigError);
  o.lr_final_fraction = 0.0;
  EXPECT_THROW(LrSchedule{o}, ConfigError);
}

TEST(TrainProgress, EtaIsCappedByTheTimeLimit) {
  EXPECT_DOUBLE_EQ(remaining_seconds(0.5, 1000, 0, 10), 500.0);   // no limit
  EXPECT_DOUBLE_EQ(remaining_seconds(0.5, 1000, 40, 10), 30.0);   // 40 s limit, 10 s gone
  EXPECT_DOUBLE_EQ(remaining_seconds(0.5, 10, 40, 10), 5.0);      // the steps end first
  EXPECT_DOUBLE_EQ(remaining_seconds(0.5, 1000, 40, 50), 0.0);
}

TEST(TrainProgress, PsnrOfAnMseOfUnitValues) {
  EXPECT_NEAR(psnr_of_mse(1.0), 0.0, 1e-12);
  EXPECT_NEAR(psnr_of_mse(0.01), 20.0, 1e-12);
  EXPECT_NEAR(psnr_of_mse(2.5e-5), 46.020599913279625, 1e-9);  // 40 + 10 log10(4)
  EXPECT_NEAR(psnr_of_mse(0.0), 120.0, 1e-12);                   // floored at 1e-12
}

TEST(TrainProgress, SmoothedStatsAreTheMeanAtFirstThenAMovingAverage) {
  SmoothedStats s;
  s.add(4, 0.1, 1);
  s.add(2, 0.3, 3);
  EXPECT_DOUBLE_EQ(s.loss, 3.0);
  EXPECT_DOUBLE_EQ(s.mse, 0.2);
  for (int i = 0; i < 1000; ++i) s.add(7, 0.5, 2);
  EXPECT_NEAR(s.loss, 7.0, 1e-6);  // the early values have decayed away
}

TEST(TrainProgress, RoundTripsThroughCheckpointMetadata) {
  TrainProgress p{nlohmann::json{{"kind", "plateau"}, {"rate", 1e-4}}, 123.5, 27.25};
  TensorFile file;
  file.metadata[kTrainProgressKey] = progress_json(p).dump();
  TrainProgress back = progress_from_checkpoint(file);
  EXPECT_DOUBLE_EQ(back.elapsed_seconds, 123.5);
  EXPECT_DOUBLE_EQ(back.best_val_psnr, 27.25);
  EXPECT_EQ(back.lr_schedule["rate"], 1e-4);
  TrainProgress none = progress_from_checkpoint(TensorFile{});  // an older checkpoint
  EXPECT_EQ(none.elapsed_seconds, 0.0);
  EXPECT_TRUE(std::isnan(none.best_val_psnr));
}

}  // namespace
}  // namespace plexus::ae
