// The coding tables. Those of the FactorizedEntropyModel
// (plexus/codec/factorized_tables.h) against an independent scalar evaluation
// of the density chain: cumulative_logits, the bisected quantiles and integer
// medians, the quantised frequencies, a coded size close to the model's own
// information content, and the safetensors storage with its validation. The
// Gaussian ones (plexus/codec/gaussian_tables.h): the scale table, every
// table valid with the probabilities of the discretised Gaussian, and rANS
// round trips of random latents with huge outliers. The rANS coder
// (plexus/codec/rans.h): round trips over random, adversarial and extreme
// streams, the empty stream, escapes of any 32-bit value, coded sizes against
// the ideal code length, and a decoder that throws IoError (never crashes) on
// truncated, extended and bit-flipped streams.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "plexus/builtin_layers.h"
#include "plexus/checksum.h"
#include "factorized_entropy_model/factorized_entropy_model.h"
#include "plexus/codec/factorized_tables.h"
#include "plexus/codec/gaussian_tables.h"
#include "plexus/codec/rans.h"
#include "plexus/error.h"
#include "plexus/registry.h"

namespace plexus {
namespace {

constexpr std::array<int, 5> kWidths = {1, 3, 3, 3, 1};
constexpr std::int64_t kChannels = 4;

// A layer with C = 4 channels whose densities differ in shape, width and
// location: parameters moved off their initial values, channel c's output
// bias shifted by 7 (c - 1.5) so the medians lie apart, one channel narrowed.
std::unique_ptr<Layer> make_layer() {
  auto layer =
      builtin_registry().create("FactorizedEntropyModel", "entropy", nlohmann::json{{"likelihood_bound", 0.0}});
  const Shape shape{1, kChannels, 1, 1};
  layer->output_shapes({shape});
  layer->create_parameters({shape});
  std::mt19937_64 rng(17);
  layer->initialize_parameters(DType::f32, Device::cpu(), rng);
  std::uniform_real_distribution<double> offset(-1.0, 1.0);
  for (Parameter* p : layer->parameters()) {
    std::vector<double> values = p->value.to_values();
    for (double& v : values) v += offset(rng);
    if (p->name == "bias3")
      for (std::int64_t c = 0; c < kChannels; ++c) values[c] += 7.0 * (c - 1.5);
    if (p->name == "matrix0") values[2 * 3] += 3.0;  // channel 2: steeper first layer
    p->value = Tensor::from_values(values, p->shape, p->value.dtype());
  }
  return layer;
}

const layers::FactorizedEntropyModel& model_of(const Layer& layer) {
  return dynamic_cast<const layers::FactorizedEntropyModel&>(layer);
}

// The chain before its final sigmoid for channel c, from the paper's definition.
double naive_logit(Layer& layer, std::int64_t c, double x) {
  std::vector<double> v = {x};
  for (int k = 0; k < 4; ++k) {
    const int in = kWidths[k], out = kWidths[k + 1];
    const auto matrix = layer.parameter("matrix" + std::to_string(k)).value.to_values();
    const auto bias = layer.parameter("bias" + std::to_string(k)).value.to_values();
    std::vector<double> z(out);
    for (int i = 0; i < out; ++i) {
      z[i] = bias[c * out + i];
      for (int j = 0; j < in; ++j) z[i] += std::log1p(std::exp(matrix[(c * out + i) * in + j])) * v[j];
    }
    if (k == 3) return z[0];
    const auto factor = layer.parameter("factor" + std::to_string(k)).value.to_values();
    v.assign(out, 0.0);
    for (int i = 0; i < out; ++i) v[i] = z[i] + std::tanh(factor[c * out + i]) * std::tanh(z[i]);
  }
  return 0;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double naive_cdf(Layer& layer, std::int64_t c, double x) { return sigmoid(naive_logit(layer, c, x)); }
double naive_pmf(Layer& layer, std::int64_t c, std::int64_t k) {
  return naive_cdf(layer, c, k + 0.5) - naive_cdf(layer, c, k - 0.5);
}

TEST(CodingTables, CumulativeLogitsMatchTheNaiveChain) {
  auto layer = make_layer();
  const std::vector<double> points = {-3.5, 0.0, 2.25, -10, 1, 4, 0.5, 7, -1, -0.25, 30, -30};
  const std::vector<double> logits = model_of(*layer).cumulative_logits(points, 3);
  for (std::int64_t c = 0; c < kChannels; ++c)
    for (int i = 0; i < 3; ++i) {
      const double expected = naive_logit(*layer, c, points[c * 3 + i]);
      EXPECT_NEAR(logits[c * 3 + i], expected, 1e-12 * std::max(1.0, std::abs(expected)));
    }
  EXPECT_THROW(model_of(*layer).cumulative_logits(points, 2), Error);
}

TEST(CodingTables, RangesHoldAllButTheTailMassAndAreTight) {
  auto layer = make_layer();
  const double tail = 1e-3;
  const codec::FactorizedCodingTables tables = codec::build_coding_tables(model_of(*layer), tail);
  ASSERT_EQ(tables.channels(), kChannels);
  std::set<std::int32_t> medians;
  for (std::int64_t c = 0; c < kChannels; ++c) {
    const std::int64_t m = tables.medians[c];
    medians.insert(tables.medians[c]);
    // The integer median: c(m - 1/2) <= 1/2 <= c(m + 1/2).
    EXPECT_LE(naive_cdf(*layer, c, m - 0.5), 0.5 + 1e-12) << "channel " << c;
    EXPECT_GE(naive_cdf(*layer, c, m + 0.5), 0.5 - 1e-12) << "channel " << c;
    const std::int64_t lo = m + tables.tables[c].min, hi = lo + tables.tables[c].count() - 1;
    // At most tail / 2 outside on each side, and one value fewer would leave more.
    EXPECT_LE(naive_cdf(*layer, c, lo - 0.5), tail / 2 * (1 + 1e-9)) << "channel " << c;
    EXPECT_GT(naive_cdf(*layer, c, lo + 0.5), tail / 2) << "channel " << c;
    EXPECT_GE(naive_cdf(*layer, c, hi + 0.5), 1 - tail / 2 * (1 + 1e-9)) << "channel " << c;
    EXPECT_LT(naive_cdf(*layer, c, hi - 0.5), 1 - tail / 2) << "channel " << c;
  }
  EXPECT_EQ(medians.size(), static_cast<std::size_t>(kChannels)) << "the shifted medians should differ";
}

TEST(CodingTables, DefaultTailMassLeavesAtMostHalfABillionthOnEachSide) {
  auto layer = make_layer();
  const codec::FactorizedCodingTables tables = codec::build_coding_tables(model_of(*layer));
  for (std::int64_t c = 0; c < kChannels; ++c) {
    const std::int64_t lo = tables.medians[c] + tables.tables[c].min, hi = lo + tables.tables[c].count() - 1;
    // On the logit scale: logit(c) <= log(5e-10) (to first order), and the same above.
    EXPECT_LE(naive_logit(*layer, c, lo - 0.5), std::log(5e-10) + 1e-6) << "channel " << c;
    EXPECT_GE(naive_logit(*layer, c, hi + 0.5), -std::log(5e-10) - 1e-6) << "channel " << c;
    EXPECT_GT(naive_logit(*layer, c, lo + 0.5), std::log(5e-10)) << "channel " << c;
  }
}

TEST(CodingTables, FrequenciesFollowTheDensity) {
  auto layer = make_layer();
  const codec::FactorizedCodingTables tables = codec::build_coding_tables(model_of(*layer));
  for (std::int64_t c = 0; c < kChannels; ++c) {
    const codec::CodingTable& table = tables.tables[c];
    ASSERT_NO_THROW(codec::check_table(table, "channel"));
    const double n = table.count() + 1;
    for (std::int32_t i = 0; i < table.count(); ++i) {
      const double p = naive_pmf(*layer, c, tables.medians[c] + table.min + i);
      const double q = (table.cdf[i + 1] - table.cdf[i]) / 65536.0;
      // Each gets 1 plus its share of 2^16 - n, plus at most 1 from rounding.
      EXPECT_NEAR(q, p, (2 + p * n) / 65536.0) << "channel " << c << " symbol " << table.min + i;
    }
  }
}

TEST(CodingTables, CodedSizeIsWithinHalfAPercentOfTheInformationContent) {
  auto layer = make_layer();
  const codec::FactorizedCodingTables tables = codec::build_coding_tables(model_of(*layer));
  // Sample each channel's rounded latent by inverting the naive cumulative,
  // tabulated at the half-integers of the table's range (outside it lies 1e-9).
  std::vector<std::int64_t> first(kChannels);
  std::vector<std::vector<double>> cdf(kChannels);
  for (std::int64_t c = 0; c < kChannels; ++c) {
    first[c] = tables.medians[c] + tables.tables[c].min;
    for (std::int64_t k = first[c]; k <= first[c] + tables.tables[c].count(); ++k)
      cdf[c].push_back(naive_cdf(*layer, c, k - 0.5));
  }
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  codec::RansEncoder encoder;
  std::vector<std::pair<std::int64_t, std::int32_t>> coded;  // channel, symbol
  double information_bits = 0;
  for (int i = 0; i < 40000; ++i) {
    const std::int64_t c = i % kChannels;
    const double u = cdf[c].front() + uniform(rng) * (cdf[c].back() - cdf[c].front());
    std::size_t index = 0;
    while (index + 2 < cdf[c].size() && cdf[c][index + 1] < u) ++index;
    const std::int64_t k = first[c] + static_cast<std::int64_t>(index);
    information_bits -= std::log2(cdf[c][index + 1] - cdf[c][index]);
    const auto symbol = static_cast<std::int32_t>(k - tables.medians[c]);
    encoder.put(symbol, tables.tables[c]);
    coded.push_back({c, symbol});
  }
  const std::vector<std::uint8_t> bytes = encoder.finish();
  EXPECT_LT(8.0 * bytes.size(), information_bits * 1.005 + 64) << "information " << information_bits / 8 << " bytes";
  EXPECT_GT(8.0 * bytes.size(), information_bits * 0.98);
  codec::RansDecoder decoder(bytes.data(), bytes.size());
  for (const auto& [c, symbol] : coded) ASSERT_EQ(decoder.get(tables.tables[c]), symbol);
  decoder.finish();
}

TEST(CodingTables, StoreAndLoadRoundTripExactly) {
  auto layer = make_layer();
  const codec::FactorizedCodingTables tables = codec::build_coding_tables(model_of(*layer));
  TensorFile file;
  const std::string prefix = codec::coding_tables_prefix("entropy_model");
  EXPECT_EQ(prefix, "entropy_model.coding.");
  EXPECT_FALSE(codec::has_coding_tables(file, prefix));
  codec::store_coding_tables(tables, prefix, file);
  EXPECT_TRUE(codec::has_coding_tables(file, prefix));
  const codec::FactorizedCodingTables loaded = codec::load_coding_tables(file, prefix, kChannels, "model.safetensors");
  EXPECT_EQ(loaded.medians, tables.medians);
  for (std::int64_t c = 0; c < kChannels; ++c) {
    EXPECT_EQ(loaded.tables[c].min, tables.tables[c].min);
    EXPECT_EQ(loaded.tables[c].cdf, tables.tables[c].cdf);
  }
}

std::string load_error(const TensorFile& file, std::int64_t channels = kChannels) {
  try {
    codec::load_coding_tables(file, "e.coding.", channels, "m.safetensors");
  } catch (const IoError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CodingTables, LoadRejectsDamagedTablesNamingTheTensor) {
  auto layer = make_layer();
  TensorFile good;
  codec::store_coding_tables(codec::build_coding_tables(model_of(*layer)), "e.coding.", good);
  EXPECT_EQ(load_error(good), "no error");
  EXPECT_NE(load_error(good, 5).find("'e.coding.cdf' is [4,"), std::string::npos) << load_error(good, 5);

  TensorFile missing = good;
  missing.tensors.erase("e.coding.median");
  EXPECT_NE(load_error(missing).find("'e.coding.median' is missing"), std::string::npos);

  auto with_value = [&](const std::string& name, std::size_t index, double value) {
    TensorFile file = good;
    std::vector<double> values = file.tensors[name].to_values();
    values[index] = value;
    file.tensors[name] = Tensor::from_values(values, file.tensors[name].shape());
    return load_error(file);
  };
  EXPECT_NE(with_value("e.coding.offset", 1, 0.5).find("not an integer"), std::string::npos);
  EXPECT_NE(with_value("e.coding.cdf_length", 0, 1).find("cdf_length"), std::string::npos);
  EXPECT_NE(with_value("e.coding.cdf", 2, 0).find("rise strictly"), std::string::npos)
      << with_value("e.coding.cdf", 2, 0);
  EXPECT_NE(with_value("e.coding.cdf", 0, 70000).find("not an integer in [0, 65536]"), std::string::npos);
}

}  // namespace
}  // namespace plexus

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

namespace plexus::codec {
namespace {

struct Item {
  std::int32_t value;
  const CodingTable* table;
};

std::vector<std::uint8_t> encode(const std::vector<Item>& items) {
  RansEncoder encoder;
  for (const Item& item : items) encoder.put(item.value, *item.table);
  return encoder.finish();
}

// Decodes as many values as `items` with their tables; finish() must pass.
std::vector<std::int32_t> decode(const std::vector<std::uint8_t>& bytes, const std::vector<Item>& items) {
  RansDecoder decoder(bytes.data(), bytes.size());
  std::vector<std::int32_t> values;
  for (const Item& item : items) values.push_back(decoder.get(*item.table));
  decoder.finish();
  return values;
}

void expect_round_trip(const std::vector<Item>& items) {
  const std::vector<std::uint8_t> bytes = encode(items);
  const std::vector<std::int32_t> values = decode(bytes, items);
  ASSERT_EQ(values.size(), items.size());
  for (std::size_t i = 0; i < items.size(); ++i) ASSERT_EQ(values[i], items[i].value) << "symbol " << i;
}

// Ideal code length in bits: -log2(f / 2^16) per in-range symbol, and for an
// escape that plus 3 + 4n bypass bits.
double ideal_bits(const std::vector<Item>& items) {
  double bits = 0;
  for (const Item& item : items) {
    const CodingTable& t = *item.table;
    std::int64_t index = static_cast<std::int64_t>(item.value) - t.min;
    if (index >= 0 && index < t.count()) {
      bits -= std::log2((t.cdf[index + 1] - t.cdf[index]) / 65536.0);
      continue;
    }
    const std::uint32_t code = (static_cast<std::uint32_t>(item.value) << 1) ^ (item.value < 0 ? ~0u : 0u);
    int nibbles = 1;
    while (nibbles < 8 && (code >> (4 * nibbles)) != 0) ++nibbles;
    bits += -std::log2((t.cdf[t.count() + 1] - t.cdf[t.count()]) / 65536.0) + 3 + 4 * nibbles;
  }
  return bits;
}

CodingTable table_of(std::int32_t min, std::vector<std::uint32_t> frequencies) {
  CodingTable table;
  table.min = min;
  table.cdf = {0};
  for (std::uint32_t f : frequencies) table.cdf.push_back(table.cdf.back() + f);
  return table;
}

TEST(Rans, EmptyStreamIsTheFourByteStateAndDecodesToNothing) {
  RansEncoder encoder;
  const std::vector<std::uint8_t> bytes = encoder.finish();
  ASSERT_EQ(bytes.size(), 4u);
  RansDecoder decoder(bytes.data(), bytes.size());
  EXPECT_NO_THROW(decoder.finish());
}

TEST(Rans, QuantizeTableMatchesHandComputedFrequencies) {
  // n = 4 entries (3 symbols + escape) get 1 each; 65532 shared 1/2, 1/4, 1/4, 0.
  const CodingTable table = quantize_table(-1, {0.5, 0.25, 0.25}, 0.0);
  EXPECT_EQ(table.min, -1);
  EXPECT_EQ(table.cdf, (std::vector<std::uint32_t>{0, 32767, 49151, 65535, 65536}));
  // n = 3: 65533 shared as 32766.5, 32766.5, 0; the one unit rounding leaves
  // goes to the lowest index of the tied remainders.
  const CodingTable halves = quantize_table(0, {1.0, 1.0}, 0.0);
  EXPECT_EQ(halves.cdf, (std::vector<std::uint32_t>{0, 32768, 65535, 65536}));
  EXPECT_NO_THROW(check_table(table, "table"));
}

TEST(Rans, QuantizeTableRejectsBadProbabilities) {
  EXPECT_THROW(quantize_table(0, {0.0, 0.0}, 0.0), ConfigError);
  EXPECT_THROW(quantize_table(0, {0.5, -0.1}, 0.0), ConfigError);
  EXPECT_THROW(quantize_table(0, {0.5, std::nan("")}, 0.0), ConfigError);
  EXPECT_THROW(quantize_table(0, std::vector<double>(kMaxTableSymbols + 1, 1.0), 0.0), ConfigError);
  // The largest table: every symbol and the escape at least 1.
  const CodingTable widest = quantize_table(0, std::vector<double>(kMaxTableSymbols, 1.0), 1e-12);
  EXPECT_NO_THROW(check_table(widest, "widest"));
  EXPECT_EQ(widest.count(), kMaxTableSymbols);
}

TEST(Rans, CheckTableNamesWhatIsWrong) {
  auto message = [](const CodingTable& t) {
    try {
      check_table(t, "channel 3");
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(table_of(0, {10, 20})).find("must end at 65536"), std::string::npos);
  CodingTable flat = table_of(0, {65536, 0});
  EXPECT_NE(message(flat).find("rise strictly"), std::string::npos);
  CodingTable start = table_of(0, {65535, 1});
  start.cdf[0] = 1;
  EXPECT_NE(message(start).find("start at 0"), std::string::npos);
  CodingTable overflow = table_of(std::numeric_limits<std::int32_t>::max(), {65535, 1});
  overflow.cdf.insert(overflow.cdf.begin() + 1, 5);
  EXPECT_NE(message(overflow).find("32-bit range"), std::string::npos);
  EXPECT_EQ(message(table_of(-5, {100, 65435, 1})), "no error");
}

TEST(Rans, RandomStreamsOverSeveralTablesRoundTripNearTheIdealLength) {
  std::mt19937 random(7);
  std::vector<CodingTable> tables;
  for (int t = 0; t < 6; ++t) {
    std::vector<double> p(1 + random() % 60);
    for (double& v : p) v = std::exp(-0.2 * (random() % 40));
    tables.push_back(quantize_table(static_cast<std::int32_t>(random() % 41) - 20, p, 1e-4));
  }
  std::vector<Item> items;
  for (int i = 0; i < 200000; ++i) {
    const CodingTable& table = tables[random() % tables.size()];
    // Draw from the table's own distribution, escapes included.
    const std::uint32_t slot = random() % 65536;
    std::int32_t index = 0;
    while (table.cdf[index + 1] <= slot) ++index;
    std::int32_t value = table.min + index;
    if (index == table.count()) value = table.min - 1 - static_cast<std::int32_t>(random() % 100000);
    items.push_back({value, &table});
  }
  expect_round_trip(items);
  const double ideal_bytes = ideal_bits(items) / 8;
  const double bytes = static_cast<double>(encode(items).size());
  EXPECT_GE(bytes, ideal_bytes - 1);
  EXPECT_LE(bytes, ideal_bytes * 1.001 + 8) << "ideal " << ideal_bytes;
}

TEST(Rans, ExtremeDistributionsRoundTrip) {
  // Nearly certain symbol: 65535 of 65536 (and the escape 1).
  const CodingTable certain = table_of(0, {65535, 1});
  std::vector<Item> zeros(100000, Item{0, &certain});
  expect_round_trip(zeros);
  EXPECT_LE(encode(zeros).size(), 8u);  // 100000 * 2.2e-5 bits, plus the state
  // The rarest symbol over and over: 16 bits each.
  const CodingTable rare = table_of(10, {1, 65534, 1});
  std::vector<Item> rares(5000, Item{10, &rare});
  expect_round_trip(rares);
  EXPECT_NEAR(static_cast<double>(encode(rares).size()), 5000 * 2, 8);
  // Uniform over the widest table.
  const CodingTable wide = quantize_table(-2000, std::vector<double>(kMaxTableSymbols, 1.0), 1.0 / 4096);
  std::vector<Item> spread;
  for (std::int32_t v = -2000; v < -2000 + kMaxTableSymbols; v += 3) spread.push_back({v, &wide});
  expect_round_trip(spread);
}

TEST(Rans, EscapesCodeEveryThirtyTwoBitValue) {
  const CodingTable none;  // no symbols: everything escapes
  const CodingTable narrow = table_of(-1, {30000, 30000, 5536});
  std::vector<Item> items;
  const std::int32_t extremes[] = {std::numeric_limits<std::int32_t>::min(),
                                   std::numeric_limits<std::int32_t>::min() + 1,
                                   std::numeric_limits<std::int32_t>::max(),
                                   std::numeric_limits<std::int32_t>::max() - 1,
                                   0,
                                   -1,
                                   1,
                                   7,
                                   -8,
                                   8,
                                   15,
                                   16,
                                   -2,
                                   2,
                                   1 << 20,
                                   -(1 << 27)};
  for (std::int32_t v : extremes) {
    items.push_back({v, &none});
    if (v < -1 || v > 0) items.push_back({v, &narrow});
  }
  std::mt19937 random(3);
  for (int i = 0; i < 20000; ++i) items.push_back({static_cast<std::int32_t>(random()), i % 2 ? &none : &narrow});
  expect_round_trip(items);
  EXPECT_LE(static_cast<double>(encode(items).size()), ideal_bits(items) / 8 * 1.001 + 8);
}

TEST(Rans, AdversarialAlternationRoundTrips) {
  // Alternate the most and least likely symbols and escapes of opposite signs.
  const CodingTable skewed = table_of(0, {65000, 1, 534, 1});
  std::vector<Item> items;
  for (int i = 0; i < 30000; ++i) {
    const std::int32_t pattern[] = {0, 1, 2, -1, 3, std::numeric_limits<std::int32_t>::max()};
    items.push_back({pattern[i % 6], &skewed});
  }
  expect_round_trip(items);
}

// A short mixed stream used by the corruption tests.
struct Sample {
  CodingTable table = table_of(-3, {100, 2000, 30000, 30000, 3000, 435, 1});
  std::vector<Item> items;
  std::vector<std::uint8_t> bytes;
  Sample() {
    std::mt19937 random(11);
    for (int i = 0; i < 400; ++i) {
      std::int32_t v = static_cast<std::int32_t>(random() % 7) - 3;
      if (i % 50 == 0) v = 1000 + i;
      items.push_back({v, &table});
    }
    bytes = encode(items);
  }
};

TEST(Rans, TruncatedStreamsThrowInsteadOfCrashing) {
  Sample sample;
  for (std::size_t size = 0; size < sample.bytes.size(); ++size) {
    std::vector<std::uint8_t> prefix(sample.bytes.begin(), sample.bytes.begin() + size);
    EXPECT_THROW(decode(prefix, sample.items), IoError) << "prefix of " << size << " bytes";
  }
  try {
    std::vector<std::uint8_t> half(sample.bytes.begin(), sample.bytes.begin() + sample.bytes.size() / 2);
    decode(half, sample.items);
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("ends early"), std::string::npos) << e.what();
  }
}

TEST(Rans, ExtendedStreamIsRejectedAtTheEnd) {
  Sample sample;
  std::vector<std::uint8_t> longer = sample.bytes;
  longer.push_back(0);
  try {
    decode(longer, sample.items);
    FAIL() << "an extended stream decoded without error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("1 byte(s) left"), std::string::npos) << e.what();
  }
}

TEST(Rans, EveryBitFlipEitherThrowsOrDecodesWithinBounds) {
  Sample sample;
  int detected = 0, total = 0;
  for (std::size_t byte = 0; byte < sample.bytes.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::uint8_t> flipped = sample.bytes;
      flipped[byte] ^= static_cast<std::uint8_t>(1u << bit);
      ++total;
      try {
        decode(flipped, sample.items);
      } catch (const IoError&) {
        ++detected;
      }
    }
  // The end-state check catches nearly all of them; the file checksum catches the rest.
  EXPECT_GT(detected, total * 9 / 10) << detected << " of " << total;
}

TEST(Rans, StateOutOfRangeIsRejected) {
  const std::vector<std::uint8_t> low{0, 0, 0, 0};
  EXPECT_THROW(RansDecoder(low.data(), low.size()), IoError);
  const std::vector<std::uint8_t> high{0, 0, 0, 0x80};
  EXPECT_THROW(RansDecoder(high.data(), high.size()), IoError);
  const std::vector<std::uint8_t> short_stream{1, 2, 3};
  EXPECT_THROW(RansDecoder(short_stream.data(), short_stream.size()), IoError);
}

TEST(Checksums, MatchPublishedTestVectors) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
  Fnv1a64 empty;
  EXPECT_EQ(empty.value(), 0xcbf29ce484222325ull);
  Fnv1a64 a;
  a.add("a", 1);
  EXPECT_EQ(a.value(), 0xaf63dc4c8601ec8cull);
  Fnv1a64 split1, split2;
  split1.add_field("ab");
  split1.add_field("c");
  split2.add_field("a");
  split2.add_field("bc");
  EXPECT_NE(split1.value(), split2.value());
}

}  // namespace
}  // namespace plexus::codec
