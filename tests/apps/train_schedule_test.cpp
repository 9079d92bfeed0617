// plexus-ae's progress-line arithmetic (apps/autoencoder/train_progress.cpp,
// and console.cpp's line for batches of files), with values worked out by hand. The schedule and the clock are the
// trainer's (tests/framework/train/).
#include <gtest/gtest.h>

#include <cmath>

#include "console.h"
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
