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

// A version-5 file's sections, read as docs/bitstream.md lays them out:
// [type, flags, payload offset, payload length] each, and for a coded
// stream its [channels, height, width] and the rANS stream's offset.
struct SectionView {
  std::uint32_t type = 0, flags = 0;
  std::size_t payload = 0, length = 0;
  std::uint32_t channels = 0, height = 0, width = 0;
  std::size_t stream = 0;
};
inline std::vector<SectionView> sections_of(const std::vector<std::uint8_t>& bytes) {
  std::vector<SectionView> sections;
  const std::size_t count = bytes[36] | bytes[37] << 8;
  std::size_t at = 38;
  for (std::size_t k = 0; k < count; ++k) {
    SectionView section;
    section.type = bytes[at] | bytes[at + 1] << 8;
    section.flags = bytes[at + 2] | bytes[at + 3] << 8;
    section.length = get32(bytes, at + 4);
    section.payload = at + 8;
    if (section.type == 1) {
      section.channels = get32(bytes, at + 8);
      section.height = get32(bytes, at + 12);
      section.width = get32(bytes, at + 16);
      section.stream = at + 20;
    }
    sections.push_back(section);
    at = section.payload + section.length;
  }
  EXPECT_EQ(at + 4, bytes.size()) << "the sections and the checksum fill the file";
  return sections;
}

// Recomputes the trailing CRC-32 over everything before it.
inline void reseal(std::vector<std::uint8_t>& bytes) {
  put32(bytes, bytes.size() - 4, plexus::crc32(bytes.data(), bytes.size() - 4));
}

// Flips bits of the coded stream (bytes [first_byte, end), end the checksum
// unless given: a stream followed by other sections ends earlier; every
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
    const std::function<std::string(const std::vector<std::uint8_t>&)>& decode_error, std::size_t end = 0) {
  BitFlipOutcome outcome;
  if (end == 0) end = bytes.size() - 4;
  for (std::size_t byte = first_byte; byte < end; byte += byte_step)
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

// CRC-32 catches every single-bit error; flips in the magic, version and
// length fields are named before the checksum is looked at (version 1 read
// as version 5: its section count).
inline void expect_every_bit_flip_refused(
    const std::vector<std::uint8_t>& bytes,
    const std::function<std::string(const std::vector<std::uint8_t>&)>& decode_error) {
  for (std::size_t byte = 0; byte < bytes.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::uint8_t> flipped = bytes;
      flipped[byte] ^= static_cast<std::uint8_t>(1u << bit);
      const std::string message = decode_error(flipped);
      auto says = [&](const char* part) { return message.find(part) != std::string::npos; };
      EXPECT_TRUE(says("checksum mismatch") || says("not a plexus-ae") || says("format version") || says("truncated") ||
                  says("extended") || says("sections (1 to 64 are allowed)"))
          << "byte " << byte << " bit " << bit << ": " << message;
    }
}

}  // namespace plexus::testing
