#include "plexus/codec/gaussian_tables.h"

#include <cmath>
#include <string>

#include "plexus/error.h"

namespace plexus::codec {

namespace {

// Phi(-x) = erfc(x / sqrt 2) / 2: the upper tail, accurate for large x.
double upper_tail(double x) { return 0.5 * std::erfc(x / std::sqrt(2.0)); }

CodingTable table_for(double sigma, double tail_mass) {
  std::int32_t n = 0;
  while (n < kMaxTableSymbols / 2 && 2 * upper_tail((n + 0.5) / sigma) > tail_mass) ++n;
  std::vector<double> probabilities(static_cast<std::size_t>(2 * n + 1));
  for (std::int32_t s = -n; s <= n; ++s) {
    const double magnitude = std::abs(s);
    probabilities[s + n] = s == 0 ? 1 - 2 * upper_tail(0.5 / sigma)
                                  : upper_tail((magnitude - 0.5) / sigma) - upper_tail((magnitude + 0.5) / sigma);
  }
  return quantize_table(-n, probabilities, 2 * upper_tail((n + 0.5) / sigma));
}

}  // namespace

std::vector<double> log_scale_table(double min, double max, int levels) {
  if (!(min > 0) || !(max > min) || !std::isfinite(max) || levels < 2)
    throw ConfigError("scale table: need 0 < min < max and at least 2 levels, got min " + std::to_string(min) +
                      ", max " + std::to_string(max) + ", " + std::to_string(levels) + " levels");
  std::vector<double> scales(static_cast<std::size_t>(levels));
  const double low = std::log(min), high = std::log(max);
  for (int i = 0; i < levels; ++i) scales[i] = std::exp(low + (high - low) * i / (levels - 1));
  return scales;
}

GaussianTables build_gaussian_tables(const std::vector<double>& scales, double tail_mass) {
  if (!(tail_mass > 0 && tail_mass < 1)) throw ConfigError("Gaussian coding tables: tail mass must be in (0, 1)");
  GaussianTables result;
  for (std::size_t i = 0; i < scales.size(); ++i) {
    if (!(scales[i] > 0) || !std::isfinite(scales[i]) || (i > 0 && !(scales[i] > scales[i - 1])))
      throw ConfigError("Gaussian coding tables: the scale table must be positive, finite and increasing (entry " +
                        std::to_string(i) + " is " + std::to_string(scales[i]) + ")");
    result.tables.push_back(table_for(scales[i], tail_mass));
  }
  result.scales = scales;
  return result;
}

}  // namespace plexus::codec
