// lane_hash64: a fingerprint that must change with any change of the bytes
// it covers (the replica check relies on it to catch a one-bit drift).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "plexus/checksum.h"

namespace plexus {
namespace {

std::vector<std::uint8_t> random_bytes(std::size_t size, std::uint32_t seed) {
  std::vector<std::uint8_t> bytes(size);
  std::uint32_t x = seed;
  for (auto& b : bytes) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::uint8_t>(x >> 24);
  }
  return bytes;
}

// 75 bytes: two rounds of all four lanes, one more word, and 3 bytes after
// the last whole word. Every one of its 600 bits changes the value alone.
TEST(LaneHash64, EveryBitOfEveryWordAndOfTheTailCounts) {
  std::vector<std::uint8_t> bytes = random_bytes(75, 7);
  const std::uint64_t original = lane_hash64(bytes.data(), bytes.size());
  std::set<std::uint64_t> seen{original};
  for (std::size_t i = 0; i < bytes.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      bytes[i] ^= static_cast<std::uint8_t>(1u << bit);
      const std::uint64_t flipped = lane_hash64(bytes.data(), bytes.size());
      EXPECT_NE(flipped, original) << "byte " << i << " bit " << bit;
      seen.insert(flipped);
      bytes[i] ^= static_cast<std::uint8_t>(1u << bit);
    }
  EXPECT_EQ(seen.size(), 1u + 8 * bytes.size()) << "two one-bit changes gave the same value";
  EXPECT_EQ(lane_hash64(bytes.data(), bytes.size()), original);  // deterministic
}

// The order of the words counts, within a lane and across lanes.
TEST(LaneHash64, SwappingTwoWordsChangesTheValue) {
  const std::vector<std::uint8_t> bytes = random_bytes(8 * 12, 11);
  const std::uint64_t original = lane_hash64(bytes.data(), bytes.size());
  for (std::size_t a = 0; a < 12; ++a)
    for (std::size_t b = a + 1; b < 12; ++b) {
      std::vector<std::uint8_t> swapped = bytes;
      std::memcpy(swapped.data() + 8 * a, bytes.data() + 8 * b, 8);
      std::memcpy(swapped.data() + 8 * b, bytes.data() + 8 * a, 8);
      EXPECT_NE(lane_hash64(swapped.data(), swapped.size()), original) << "words " << a << " and " << b;
    }
}

// Zeros of every length from 0 to 40 bytes: all different values, so
// trailing zeros (a longer tensor) are not lost.
TEST(LaneHash64, TheLengthCounts) {
  const std::vector<std::uint8_t> zeros(40, 0);
  std::set<std::uint64_t> values;
  for (std::size_t n = 0; n <= zeros.size(); ++n) values.insert(lane_hash64(zeros.data(), n));
  EXPECT_EQ(values.size(), zeros.size() + 1);
}

// The value depends on the bytes, not on where they lie in memory.
TEST(LaneHash64, AlignmentDoesNotMatter) {
  const std::vector<std::uint8_t> bytes = random_bytes(203, 3);
  std::vector<std::uint8_t> shifted(bytes.size() + 5);
  for (std::size_t offset = 1; offset <= 5; ++offset) {
    std::memcpy(shifted.data() + offset, bytes.data(), bytes.size());
    EXPECT_EQ(lane_hash64(shifted.data() + offset, bytes.size()), lane_hash64(bytes.data(), bytes.size()))
        << "offset " << offset;
  }
}

}  // namespace
}  // namespace plexus
