// The rANS coder (plexus/codec/rans.h): round trips over random,
// adversarial and extreme streams, the empty stream, escapes of any 32-bit
// value, coded sizes against the ideal code length, and a decoder that
// throws IoError (never crashes) on truncated, extended and bit-flipped streams.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "plexus/checksum.h"
#include "plexus/codec/rans.h"
#include "plexus/error.h"

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
