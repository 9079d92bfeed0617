// The trainer's learning-rate schedule (plexus/train/lr_schedule.h) and its
// clock (plexus/train/run_clock.h), with values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "plexus/error.h"
#include "plexus/train/lr_schedule.h"
#include "plexus/train/run_clock.h"

namespace plexus::train {
namespace {

TrainerOptions schedule_options(const std::string& kind) {
  TrainerOptions o;
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
  EXPECT_FALSE(s.observe_validation(9.0));  // better
  EXPECT_FALSE(s.observe_validation(9.5));  // worse: 1 of 2
  EXPECT_TRUE(s.observe_validation(9.2));   // worse again: decay
  EXPECT_DOUBLE_EQ(s.rate_for_step(12345), 5e-4);
  EXPECT_FALSE(s.observe_validation(9.1));  // 1 of 2 again (the count restarted)
  EXPECT_FALSE(s.observe_validation(8.0));  // better: count reset
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
  TrainerOptions o = schedule_options("step");
  o.lr_step_every = 0;
  EXPECT_THROW(LrSchedule{o}, ConfigError);
  o = schedule_options("plateau");
  o.lr_decay = 1.0;
  EXPECT_THROW(LrSchedule{o}, ConfigError);
}

TEST(LrSchedule, FinalDecaysOnceForTheLastFractionOfStepsOrTime) {
  TrainerOptions o = schedule_options("final");
  o.steps = 1000;
  o.lr_decay = 0.1;
  o.min_lr = 1e-6;
  o.lr_final_fraction = 0.2;
  LrSchedule by_steps(o);
  EXPECT_DOUBLE_EQ(by_steps.rate_for_step(0), 1e-3);
  EXPECT_DOUBLE_EQ(by_steps.rate_for_step(799), 1e-3);
  EXPECT_DOUBLE_EQ(by_steps.rate_for_step(800), 1e-4);  // the last 200 of 1000 steps
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

TEST(RunClock, EtaIsCappedByTheTimeLimit) {
  EXPECT_DOUBLE_EQ(remaining_seconds(0.5, 1000, 0, 10), 500.0);  // no limit
  EXPECT_DOUBLE_EQ(remaining_seconds(0.5, 1000, 40, 10), 30.0);  // 40 s limit, 10 s gone
  EXPECT_DOUBLE_EQ(remaining_seconds(0.5, 10, 40, 10), 5.0);     // the steps end first
  EXPECT_DOUBLE_EQ(remaining_seconds(0.5, 1000, 40, 50), 0.0);
}

}  // namespace
}  // namespace plexus::train
