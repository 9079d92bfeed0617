#pragma once
// What the progress line of `plexus-ae train` shows: smoothed values and
// PSNR (the time left is train::remaining_seconds, plexus/train/run_clock.h).
#include <cstdint>

namespace plexus::ae {

// Exponential moving average of the training loss, MSE, bpp and MS-SSIM
// over about the last kSpan steps (the plain mean while fewer steps were
// seen), so the progress line does not jump with every batch. MS-SSIM is NaN
// when the steps do not measure it.
struct SmoothedStats {
  static constexpr int kSpan = 50;
  double loss = 0, mse = 0, bpp = 0, ms_ssim = 0;
  std::int64_t count = 0;
  void add(double step_loss, double step_mse, double step_bpp, double step_ms_ssim);
};

// PSNR in dB of a mean squared error of values in [0, 1]: 10 log10(1 / mse),
// the error floored at 1e-12 so that a perfect fit reads 120 dB, not infinity.
double psnr_of_mse(double mse);

}  // namespace plexus::ae
