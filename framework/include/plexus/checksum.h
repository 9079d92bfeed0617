#pragma once
// Three hashes: CRC-32 guards a file against corruption (the compressed-image
// format, docs/bitstream.md); FNV-1a 64 fingerprints a model; lane_hash64
// fingerprints large buffers fast (a replica's parameters).
#include <cstddef>
#include <cstdint>
#include <string>

namespace plexus {

// CRC-32 as in zlib, PNG and gzip (reflected polynomial 0xEDB88320, initial
// and final XOR 0xFFFFFFFF): crc32("123456789") = 0xCBF43926.
std::uint32_t crc32(const void* data, std::size_t size);

// FNV-1a, 64-bit (offset basis 0xcbf29ce484222325, prime 0x100000001b3),
// fed piece by piece: fnv1a64 of "a" is 0xaf63dc4c8601ec8c.
class Fnv1a64 {
 public:
  void add(const void* data, std::size_t size);
  void add(const std::string& text) { add(text.data(), text.size()); }
  // A length-prefixed field, so ("ab", "c") and ("a", "bc") differ.
  void add_field(const std::string& text);
  std::uint64_t value() const { return hash_; }

 private:
  std::uint64_t hash_ = 0xcbf29ce484222325ull;
};

// A 64-bit fingerprint of a large buffer, about ten times faster than
// Fnv1a64 (which takes one multiply per byte, in one dependent chain). Four
// lanes take the 8-byte words in turn, each word by xxHash64's round
//   lane = rotl(lane + word * P2, 31) * P1,
// so the four chains run side by side; the bytes after the last whole word,
// the lanes and the size are then folded together with FNV-1a. For
// comparing buffers within one run (the replicas of data-parallel training,
// all on one kind of machine): the value is not a published hash, nor kept
// in any file.
std::uint64_t lane_hash64(const void* data, std::size_t size);

}  // namespace plexus
