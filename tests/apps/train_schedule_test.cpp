// plexus-ae's progress-line arithmetic (apps/autoencoder/train_progress.cpp),
// with values worked out by hand. The schedule and the clock are the
// trainer's (tests/framework/train/).
#include <gtest/gtest.h>

#include <cmath>

#include "train_progress.h"

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
  s.add(4, 0.1, 1);
  s.add(2, 0.3, 3);
  EXPECT_DOUBLE_EQ(s.loss, 3.0);
  EXPECT_DOUBLE_EQ(s.mse, 0.2);
  for (int i = 0; i < 1000; ++i) s.add(7, 0.5, 2);
  EXPECT_NEAR(s.loss, 7.0, 1e-6);  // the early values have decayed away
}

}  // namespace
}  // namespace plexus::ae
