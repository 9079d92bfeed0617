#pragma once
// Helpers of the codec tests that take compressed files apart: the message of
// a refused file, and little-endian fields rewritten with the trailing
// CRC-32 recomputed, so a corruption reaches the checks behind the checksum.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "plexus/checksum.h"
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
  put32(bytes, bytes.size() - 4, plexus::crc32(bytes.data(), bytes.size() - 4));
}

// Flips bits of the coded stream (bytes [first_byte, size - 4), every
// `byte_step`-th byte, bits 0, bit_step, 2 bit_step, ...), reseals each copy
// and returns how many of those files `decode_error` refused (rejected) out
// of how many it saw (total). A refusal must name the coded stream; a file
// that decodes is fine: only a crash or a wrong message is a failure.
struct BitFlipOutcome {
  int rejected = 0;
  int total = 0;
};
inline BitFlipOutcome flip_coded_stream_bits(
    const std::vector<std::uint8_t>& bytes, std::size_t first_byte, std::size_t byte_step, int bit_step,
    const std::function<std::string(const std::vector<std::uint8_t>&)>& decode_error) {
  BitFlipOutcome outcome;
  for (std::size_t byte = first_byte; byte + 4 < bytes.size(); byte += byte_step)
    for (int bit = 0; bit < 8; bit += bit_step) {
      std::vector<std::uint8_t> flipped = bytes;
      flipped[byte] ^= static_cast<std::uint8_t>(1u << bit);
      reseal(flipped);
      ++outcome.total;
      const std::string message = decode_error(flipped);
      if (message != "no error") {
        ++outcome.rejected;
        EXPECT_NE(message.find("coded stream"), std::string::npos) << message;
      }
    }
  return outcome;
}

}  // namespace plexus::testing
