#pragma once
// The level interpolation of GainUnit (math in gain_unit.h), compiled for the
// CPU and, in gain_unit.cu, for the GPU: one definition, so both devices pick
// the same pair of levels and the same weight.
#include <cstdint>

#ifdef __CUDACC__
#define PLEXUS_GAIN_FUNCTION __host__ __device__ inline
#else
#define PLEXUS_GAIN_FUNCTION inline
#endif

namespace plexus::layers::gain {

// A sample's position between two adjacent levels: s = (1-t) g[lower] + t g[lower+1].
template <typename T>
struct LevelPair {
  std::int64_t lower;  // i, in [0, K-2]
  T weight;            // t, in [0, 1]
};

// q = clamp(level, 0, K-1), i = min(floor(q), K-2), t = q - i. A NaN level
// clamps to 0 (the comparisons below are false for NaN).
template <typename T>
PLEXUS_GAIN_FUNCTION LevelPair<T> level_pair(T level, std::int64_t levels) {
  const T top = static_cast<T>(levels - 1);
  T q = level > T(0) ? level : T(0);
  q = q < top ? q : top;
  std::int64_t lower = static_cast<std::int64_t>(q);  // floor, since q >= 0
  if (lower > levels - 2) lower = levels - 2;
  return {lower, q - static_cast<T>(lower)};
}

// s[c] = (1-t) log_gains[i, c] + t log_gains[i+1, c], log_gains row-major [K, C].
template <typename T>
PLEXUS_GAIN_FUNCTION T interpolated_log_gain(const T* log_gains, std::int64_t channels, LevelPair<T> pair,
                                             std::int64_t channel) {
  const T low = log_gains[pair.lower * channels + channel];
  const T high = log_gains[(pair.lower + 1) * channels + channel];
  return (T(1) - pair.weight) * low + pair.weight * high;
}

}  // namespace plexus::layers::gain
