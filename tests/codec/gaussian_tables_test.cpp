// The Gaussian coding tables (plexus/codec/gaussian_tables.h): the scale
// table, every table valid with the probabilities of the discretised
// Gaussian, and rANS round trips of random latents with huge outliers.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "plexus/codec/gaussian_tables.h"
#include "plexus/codec/rans.h"
#include "plexus/error.h"

namespace plexus::codec {
namespace {

TEST(GaussianTables, ScaleTableIsCompressAIs) {
  const std::vector<double> scales = log_scale_table();
  ASSERT_EQ(scales.size(), 64u);
  EXPECT_NEAR(scales.front(), 0.11, 1e-15);
  EXPECT_NEAR(scales.back(), 256, 1e-11);
  const double ratio = std::pow(256 / 0.11, 1.0 / 63);  // log-spaced: a constant ratio
  for (std::size_t i = 1; i < scales.size(); ++i) EXPECT_NEAR(scales[i] / scales[i - 1], ratio, 1e-12);
  EXPECT_THROW(log_scale_table(0, 1, 4), ConfigError);
  EXPECT_THROW(log_scale_table(1, 1, 4), ConfigError);
  EXPECT_THROW(log_scale_table(0.1, 1, 1), ConfigError);
}

TEST(GaussianTables, EveryTableIsValidAndFollowsTheGaussian) {
  const GaussianTables t = build_gaussian_tables(log_scale_table());
  ASSERT_EQ(t.tables.size(), 64u);
  for (std::size_t i = 0; i < t.tables.size(); ++i) {
    const CodingTable& table = t.tables[i];
    const double sigma = t.scales[i];
    EXPECT_NO_THROW(check_table(table, "table " + std::to_string(i)));
    for (std::size_t k = 1; k < table.cdf.size(); ++k) ASSERT_GT(table.cdf[k], table.cdf[k - 1]) << "table " << i;
    EXPECT_EQ(table.min, -(table.count() - 1) / 2) << "symmetric around 0";
    EXPECT_EQ(table.count() % 2, 1);
    // The range covers all but ~1e-9 of the mass: n + 1/2 >= 6.1 sigma (the 5e-10 quantile).
    const double n = table.count() / 2;
    EXPECT_GE(n + 0.5, 6.10 * sigma) << "sigma " << sigma;
    EXPECT_LE(n - 0.5, 6.11 * sigma) << "sigma " << sigma;
    // P(0) = erf(1 / (2 sqrt 2 sigma)), from erf rather than the erfc the tables use.
    const double p0 = std::erf(0.5 / (std::sqrt(2.0) * sigma));
    const double f0 = table.cdf[-table.min + 1] - table.cdf[-table.min];
    EXPECT_NEAR(f0 / 65536.0, p0, 2.0 * table.count() / 65536.0 + 1e-4) << "sigma " << sigma;
    // Symmetric frequencies (up to the rounding of the last remainders).
    for (std::int32_t s = 1; s <= 3 && s <= n; ++s) {
      const double plus = table.cdf[-table.min + s + 1] - table.cdf[-table.min + s];
      const double minus = table.cdf[-table.min - s + 1] - table.cdf[-table.min - s];
      EXPECT_NEAR(plus, minus, 1.0) << "sigma " << sigma << " symbol " << s;
    }
  }
  EXPECT_LE(t.tables.back().count(), kMaxTableSymbols);
}

TEST(GaussianTables, RejectsBadScaleTables) {
  EXPECT_THROW(build_gaussian_tables({0.5, 0.4}), ConfigError);
  EXPECT_THROW(build_gaussian_tables({0.0, 1.0}), ConfigError);
  EXPECT_THROW(build_gaussian_tables({1.0, std::numeric_limits<double>::infinity()}), ConfigError);
  EXPECT_THROW(build_gaussian_tables({1.0}, 0.0), ConfigError);
}

TEST(GaussianTables, RandomLatentsWithHugeOutliersRoundTrip) {
  const GaussianTables t = build_gaussian_tables(log_scale_table());
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> pick(0, 63);
  std::normal_distribution<double> normal(0, 1);
  std::uniform_int_distribution<std::int32_t> any(std::numeric_limits<std::int32_t>::min(),
                                                  std::numeric_limits<std::int32_t>::max());
  std::vector<std::int32_t> values, indices;
  for (int n = 0; n < 20000; ++n) {
    const int index = pick(rng);
    std::int32_t v = static_cast<std::int32_t>(std::llround(normal(rng) * t.scales[index]));
    if (n % 97 == 0) v = any(rng);  // an outlier anywhere in 32 bits
    if (n % 101 == 0) v = std::numeric_limits<std::int32_t>::min();
    if (n % 103 == 0) v = std::numeric_limits<std::int32_t>::max();
    values.push_back(v);
    indices.push_back(index);
  }
  RansEncoder encoder;
  for (std::size_t n = 0; n < values.size(); ++n) encoder.put(values[n], t.tables[indices[n]]);
  const std::vector<std::uint8_t> stream = encoder.finish();
  RansDecoder decoder(stream.data(), stream.size());
  for (std::size_t n = 0; n < values.size(); ++n) ASSERT_EQ(decoder.get(t.tables[indices[n]]), values[n]) << n;
  EXPECT_NO_THROW(decoder.finish());
}

TEST(GaussianTables, CodeLengthIsCloseToTheEntropy) {
  // 20,000 samples of a Gaussian of scale sigma, coded with its own table:
  // within 1% (plus the stream's 4-byte state) of -log2 of the exact likelihoods.
  const GaussianTables t = build_gaussian_tables(log_scale_table());
  std::mt19937 rng(2);
  for (int index : {0, 20, 40, 63}) {
    const double sigma = t.scales[index];
    std::normal_distribution<double> normal(0, sigma);
    RansEncoder encoder;
    double bits = 0;
    for (int n = 0; n < 20000; ++n) {
      const double v = std::round(normal(rng));
      encoder.put(static_cast<std::int32_t>(v), t.tables[index]);
      const double p =
          0.5 * (std::erf((v + 0.5) / (std::sqrt(2.0) * sigma)) - std::erf((v - 0.5) / (std::sqrt(2.0) * sigma)));
      bits -= std::log2(p);
    }
    const double coded = 8.0 * encoder.finish().size();
    EXPECT_LT(coded, 1.01 * bits + 64) << "sigma " << sigma;
    EXPECT_GT(coded, 0.99 * bits - 64) << "sigma " << sigma;
  }
}

}  // namespace
}  // namespace plexus::codec
