#pragma once
// A training run's progress: what a checkpoint keeps of it besides the step
// and the optimiser (so a resumed run continues its clock, schedule and best
// validation), and what the progress line shows (smoothed values, ETA).
#include <chrono>
#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

#include "plexus/checkpoint.h"

namespace plexus::ae {

struct TrainProgress {
  nlohmann::json lr_schedule;  // LrSchedule::state(); null before the first save
  double elapsed_seconds = 0;  // training time of every run of this --out so far
  double best_val_psnr = std::numeric_limits<double>::quiet_NaN();  // NaN: no validation yet
};

nlohmann::json progress_json(const TrainProgress& progress);
// From a checkpoint's metadata; a checkpoint without it (older plexus-ae) gives the defaults.
TrainProgress progress_from_checkpoint(const TensorFile& file);

// Exponential moving average of the training loss, MSE and bpp over about
// the last kSpan steps (the plain mean while fewer steps were seen), so the
// progress line does not jump with every batch.
struct SmoothedStats {
  static constexpr int kSpan = 50;
  double loss = 0, mse = 0, bpp = 0;
  std::int64_t count = 0;
  void add(double step_loss, double step_mse, double step_bpp);
};

// PSNR in dB of a mean squared error of values in [0, 1]: 10 log10(1 / mse),
// the error floored at 1e-12 so that a perfect fit reads 120 dB, not infinity.
double psnr_of_mse(double mse);

// Seconds left: the steps left at the current pace, capped by what remains
// of --time-limit (0: none) after `seconds_so_far` of this run.
double remaining_seconds(double seconds_per_step, std::int64_t steps_left, double time_limit, double seconds_so_far);

inline double seconds_this_run(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace plexus::ae
