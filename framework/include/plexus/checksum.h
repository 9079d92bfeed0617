#pragma once
// Two hashes: CRC-32 guards a file against corruption (the compressed-image
// format, docs/bitstream.md); FNV-1a 64 fingerprints a model or a replica's parameters.
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

}  // namespace plexus
