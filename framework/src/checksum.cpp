#include "plexus/checksum.h"

#include <array>
#include <cstring>

namespace plexus {

namespace {

std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t byte = 0; byte < 256; ++byte) {
    std::uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    table[byte] = crc;
  }
  return table;
}

}  // namespace

std::uint32_t crc32(const void* data, std::size_t size) {
  static const std::array<std::uint32_t, 256> table = make_crc_table();
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  std::uint32_t crc = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xffu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

void Fnv1a64::add(const void* data, std::size_t size) {
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    hash_ ^= bytes[i];
    hash_ *= 0x100000001b3ull;
  }
}

void Fnv1a64::add_field(const std::string& text) {
  std::uint8_t length[8];
  for (int k = 0; k < 8; ++k) length[k] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(text.size()) >> (8 * k));
  add(length, sizeof length);
  add(text);
}

std::uint64_t lane_hash64(const void* data, std::size_t size) {
  constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full;  // xxHash64's primes 1 and 2
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  const auto word = [bytes](std::size_t i) {
    std::uint64_t w;
    std::memcpy(&w, bytes + 8 * i, 8);  // any alignment
    return w;
  };
  const auto round = [](std::uint64_t lane, std::uint64_t w) {
    lane += w * kP2;
    return ((lane << 31) | (lane >> 33)) * kP1;
  };
  std::uint64_t lanes[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  const std::size_t words = size / 8;
  std::size_t i = 0;
  for (; i + 4 <= words; i += 4)
    for (std::size_t k = 0; k < 4; ++k) lanes[k] = round(lanes[k], word(i + k));
  for (; i < words; ++i) lanes[i % 4] = round(lanes[i % 4], word(i));
  Fnv1a64 fold;
  fold.add(bytes + 8 * words, size - 8 * words);
  fold.add(lanes, sizeof lanes);
  const std::uint64_t size64 = size;
  fold.add(&size64, sizeof size64);
  return fold.value();
}

}  // namespace plexus
