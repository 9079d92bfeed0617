#include "plexus/codec/factorized_tables.h"

#include <algorithm>
#include <cmath>

#include "factorized_entropy_model/factorized_entropy_model.h"
#include "plexus/error.h"

namespace plexus::codec {

namespace {

constexpr double kBracketLimit = 1 << 20;
constexpr int kBisectionSteps = 60;

double logistic(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Per channel, the x where the cumulative's logit equals `target`: first
// grow [-1, 1] by doubling until it brackets the target, then halve it.
std::vector<double> solve_logit(const layers::FactorizedEntropyModel& model, double target, const char* what) {
  const std::int64_t channels = model.channels();
  std::vector<double> low(channels, -1.0), high(channels, 1.0);
  for (bool grown = true; grown;) {
    grown = false;
    const std::vector<double> at_low = model.cumulative_logits(low, 1);
    const std::vector<double> at_high = model.cumulative_logits(high, 1);
    for (std::int64_t c = 0; c < channels; ++c) {
      if (!std::isfinite(at_low[c]) || !std::isfinite(at_high[c]))
        throw ConfigError("cannot build coding tables: channel " + std::to_string(c) +
                          "'s cumulative is not finite (the entropy model's parameters are not finite)");
      const bool low_short = at_low[c] > target, high_short = at_high[c] < target;
      if ((low_short && low[c] <= -kBracketLimit) || (high_short && high[c] >= kBracketLimit))
        throw ConfigError("cannot build coding tables: channel " + std::to_string(c) + "'s " + what +
                          " lies beyond +-2^20 (a degenerate learned density)");
      if (low_short) low[c] *= 2, grown = true;
      if (high_short) high[c] *= 2, grown = true;
    }
  }
  std::vector<double> middle(channels);
  for (int step = 0; step < kBisectionSteps; ++step) {
    for (std::int64_t c = 0; c < channels; ++c) middle[c] = 0.5 * (low[c] + high[c]);
    const std::vector<double> at_middle = model.cumulative_logits(middle, 1);
    for (std::int64_t c = 0; c < channels; ++c) (at_middle[c] < target ? low[c] : high[c]) = middle[c];
  }
  for (std::int64_t c = 0; c < channels; ++c) middle[c] = 0.5 * (low[c] + high[c]);
  return middle;
}

[[noreturn]] void fail(const std::string& who, const std::string& problem) {
  throw IoError(who + ": coding tables: " + problem);
}

// The f32 tensor `name` of `shape` whose values are all integers in [low, high].
std::vector<std::int64_t> integers(const TensorFile& file, const std::string& name, const Shape& shape, double low,
                                   double high, const std::string& who) {
  auto it = file.tensors.find(name);
  if (it == file.tensors.end()) fail(who, "tensor '" + name + "' is missing");
  if (it->second.shape() != shape)
    fail(who, "tensor '" + name + "' is " + shape_str(it->second.shape()) + ", expected " + shape_str(shape));
  std::vector<std::int64_t> values;
  for (double v : it->second.to_values()) {
    if (!(v >= low && v <= high) || v != std::floor(v))
      fail(who, "tensor '" + name + "' holds " + std::to_string(v) + ", not an integer in [" +
                    std::to_string(static_cast<std::int64_t>(low)) + ", " +
                    std::to_string(static_cast<std::int64_t>(high)) + "]");
    values.push_back(static_cast<std::int64_t>(v));
  }
  return values;
}

}  // namespace

FactorizedCodingTables build_coding_tables(const layers::FactorizedEntropyModel& model, double tail_mass) {
  if (!(tail_mass > 0 && tail_mass < 1)) throw ConfigError("coding tables: tail mass must be in (0, 1)");
  const std::int64_t channels = model.channels();
  const double tail_logit = std::log(tail_mass / 2) - std::log1p(-tail_mass / 2);
  const std::vector<double> lower = solve_logit(model, tail_logit, "lower quantile");
  const std::vector<double> median = solve_logit(model, 0.0, "median");
  const std::vector<double> upper = solve_logit(model, -tail_logit, "upper quantile");

  FactorizedCodingTables result;
  std::vector<std::int64_t> first(channels), last(channels);
  std::int64_t longest = 0;
  for (std::int64_t c = 0; c < channels; ++c) {
    const std::int64_t m = std::llround(median[c]);
    std::int64_t lo = std::min<std::int64_t>(static_cast<std::int64_t>(std::floor(lower[c] + 0.5)), m);
    std::int64_t hi = std::max<std::int64_t>(static_cast<std::int64_t>(std::ceil(upper[c] - 0.5)), m);
    const std::int64_t half = kMaxTableSymbols / 2;
    lo = std::max(lo, m - half);
    hi = std::min(hi, m + half);
    result.medians.push_back(static_cast<std::int32_t>(m));
    first[c] = lo;
    last[c] = hi;
    longest = std::max(longest, hi - lo + 2);  // the half-integer edges lo - 1/2 .. hi + 1/2
  }
  // Logits at every edge k - 1/2, k = lo .. hi + 1, rows padded with their last edge.
  std::vector<double> edges(static_cast<std::size_t>(channels * longest));
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t i = 0; i < longest; ++i)
      edges[c * longest + i] = static_cast<double>(std::min(first[c] + i, last[c] + 1)) - 0.5;
  const std::vector<double> logits = model.cumulative_logits(edges, longest);
  for (std::int64_t c = 0; c < channels; ++c) {
    const std::int64_t count = last[c] - first[c] + 1;
    const double* row = logits.data() + c * longest;
    std::vector<double> probabilities(count);
    for (std::int64_t i = 0; i < count; ++i) {
      const double l = row[i], u = row[i + 1];
      const double s = (u + l) > 0 ? -1.0 : 1.0;  // the tail side, as the layer computes p
      probabilities[i] = std::abs(logistic(s * u) - logistic(s * l));
    }
    const double escape = logistic(row[0]) + logistic(-row[count]);
    result.tables.push_back(
        quantize_table(static_cast<std::int32_t>(first[c] - result.medians[c]), probabilities, escape));
  }
  return result;
}

std::string coding_tables_prefix(const std::string& node) { return node + ".coding."; }

bool has_coding_tables(const TensorFile& file, const std::string& prefix) {
  return file.tensors.count(prefix + "cdf") > 0;
}

void store_coding_tables(const FactorizedCodingTables& tables, const std::string& prefix, TensorFile& file) {
  const std::int64_t channels = tables.channels();
  std::size_t longest = 0;
  for (const auto& t : tables.tables) longest = std::max(longest, t.cdf.size());
  std::vector<double> median, offset, length, cdf;
  for (std::int64_t c = 0; c < channels; ++c) {
    const CodingTable& t = tables.tables[c];
    median.push_back(tables.medians[c]);
    offset.push_back(t.min);
    length.push_back(static_cast<double>(t.cdf.size()));
    for (std::size_t i = 0; i < longest; ++i) cdf.push_back(i < t.cdf.size() ? t.cdf[i] : kPrecisionTotal);
  }
  file.tensors[prefix + "median"] = Tensor::from_values(median, {channels});
  file.tensors[prefix + "offset"] = Tensor::from_values(offset, {channels});
  file.tensors[prefix + "cdf_length"] = Tensor::from_values(length, {channels});
  file.tensors[prefix + "cdf"] = Tensor::from_values(cdf, {channels, static_cast<std::int64_t>(longest)});
}

FactorizedCodingTables load_coding_tables(const TensorFile& file, const std::string& prefix, std::int64_t channels,
                                          const std::string& who) {
  auto cdf_tensor = file.tensors.find(prefix + "cdf");
  if (cdf_tensor == file.tensors.end()) fail(who, "tensor '" + prefix + "cdf' is missing");
  const Shape& shape = cdf_tensor->second.shape();
  if (shape.size() != 2 || shape[0] != channels || shape[1] < 2 || shape[1] > kMaxTableSymbols + 2)
    fail(who, "tensor '" + prefix + "cdf' is " + shape_str(shape) + ", expected [" + std::to_string(channels) +
                  ", 2.." + std::to_string(kMaxTableSymbols + 2) + "]");
  const std::int64_t longest = shape[1];
  constexpr double kLimit = 1 << 22;  // medians come from a +-2^20 bracket
  const auto median = integers(file, prefix + "median", {channels}, -kLimit, kLimit, who);
  const auto offset = integers(file, prefix + "offset", {channels}, -kMaxTableSymbols, 0, who);
  const auto length = integers(file, prefix + "cdf_length", {channels}, 2, static_cast<double>(longest), who);
  const auto cdf = integers(file, prefix + "cdf", shape, 0, kPrecisionTotal, who);
  FactorizedCodingTables result;
  for (std::int64_t c = 0; c < channels; ++c) {
    CodingTable table;
    table.min = static_cast<std::int32_t>(offset[c]);
    table.cdf.assign(cdf.begin() + c * longest, cdf.begin() + c * longest + length[c]);
    try {
      check_table(table, "channel " + std::to_string(c));
    } catch (const IoError& e) {
      fail(who, e.what());
    }
    result.medians.push_back(static_cast<std::int32_t>(median[c]));
    result.tables.push_back(std::move(table));
  }
  return result;
}

}  // namespace plexus::codec
