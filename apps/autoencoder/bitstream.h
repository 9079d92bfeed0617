#pragma once
// The compressed-image file of plexus-ae (docs/bitstream.md is the
// reference). All integers little-endian:
//   offset  size  field
//   0       4     magic "PXAE"
//   4       2     format version (kBitstreamVersion)
//   6       2     flags, 0 (reserved)
//   8       8     model fingerprint (CodecModel::fingerprint)
//   16      4     image width  (pixels)
//   20      4     image height (pixels)
//   24      4     latent channels
//   28      4     latent height
//   32      4     latent width
//   36      4     S, the length of the coded stream in bytes
//   40      S     the rANS stream of every latent symbol, channel by channel, rows top to bottom
//   40 + S  4     CRC-32 of bytes [0, 40 + S)
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace plexus::ae {

inline constexpr std::uint16_t kBitstreamVersion = 1;
inline constexpr std::size_t kBitstreamHeaderBytes = 40;
inline constexpr std::size_t kBitstreamOverheadBytes = kBitstreamHeaderBytes + 4;
// The largest image a file may describe: each side and the pixel count.
inline constexpr std::uint32_t kMaxImageSide = 32768;
inline constexpr std::uint64_t kMaxImagePixels = std::uint64_t(1) << 26;

struct BitstreamHeader {
  std::uint64_t fingerprint = 0;
  std::uint32_t width = 0, height = 0;
  std::uint32_t channels = 0, latent_height = 0, latent_width = 0;
};

std::vector<std::uint8_t> write_bitstream(const BitstreamHeader& header, const std::vector<std::uint8_t>& stream);

// A parsed file: the header and where its coded stream lies in `bytes`.
struct Bitstream {
  BitstreamHeader header;
  const std::uint8_t* stream = nullptr;
  std::size_t stream_size = 0;
};

// What the decoding model expects of a file.
struct BitstreamExpectation {
  std::uint64_t fingerprint = 0;
  std::string model;  // how to name the model in messages (its path)
  std::uint32_t channels = 0;
  std::uint32_t stride = 1;
  std::uint64_t max_pixels = kMaxImagePixels;
};

// Validates every field and length before anything is used: magic, version,
// flags, sizes (truncated or extended files), checksum, fingerprint, image
// size, latent shape. Throws IoError whose message says what is wrong (the
// caller prefixes the file name). Never reads outside [bytes, bytes + size).
Bitstream parse_bitstream(const std::uint8_t* bytes, std::size_t size, const BitstreamExpectation& expected);

std::string fingerprint_text(std::uint64_t fingerprint);  // 16 hex digits

}  // namespace plexus::ae
