#pragma once
// A run's clock: the seconds trained in this process, and the time left.
#include <algorithm>
#include <chrono>
#include <cstdint>

namespace plexus::train {

inline double seconds_this_run(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Seconds left: the steps left at the current pace, capped by what remains
// of --time-limit (0: none) after `seconds_so_far` of this run.
inline double remaining_seconds(double seconds_per_step, std::int64_t steps_left, double time_limit,
                                double seconds_so_far) {
  double eta = seconds_per_step * static_cast<double>(std::max<std::int64_t>(steps_left, 0));
  if (time_limit > 0) eta = std::min(eta, std::max(0.0, time_limit - seconds_so_far));
  return eta;
}

}  // namespace plexus::train
