#pragma once
// Helpers of the codec tests that take compressed files apart: the message of
// a refused file, and little-endian fields rewritten with the trailing
// CRC-32 recomputed, so a corruption reaches the checks behind the checksum.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plexus/codec/checksum.h"
#include "plexus/error.h"

namespace plexus::testing {

// The message of the plexus::Error `action` throws, or "no error".
inline std::string error_or_none(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

inline std::uint32_t get32(const std::vector<std::uint8_t>& bytes, std::size_t at) {
  return bytes[at] | bytes[at + 1] << 8 | bytes[at + 2] << 16 | static_cast<std::uint32_t>(bytes[at + 3]) << 24;
}

inline void put32(std::vector<std::uint8_t>& bytes, std::size_t at, std::uint32_t value) {
  for (int k = 0; k < 4; ++k) bytes[at + k] = static_cast<std::uint8_t>(value >> (8 * k));
}

// Recomputes the trailing CRC-32 over everything before it.
inline void reseal(std::vector<std::uint8_t>& bytes) {
  put32(bytes, bytes.size() - 4, codec::crc32(bytes.data(), bytes.size() - 4));
}

}  // namespace plexus::testing
