#include "plexus/bfloat16.h"

#include <cstring>

namespace plexus {

std::uint16_t bf16_bits_from_f32(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u)  // NaN: keep the sign and the payload's top bits, set the quiet bit
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  // Adding 0x7fff plus the kept part's lowest bit carries into bit 16
  // exactly when the dropped half is above one half, or is one half and the
  // kept part is odd: round to nearest, ties to even. A carry out of the
  // mantissa raises the exponent (0x7f7fffff becomes infinity, 0x7f80).
  const std::uint32_t kept_lowest_bit = (bits >> 16) & 1u;
  return static_cast<std::uint16_t>((bits + 0x7fffu + kept_lowest_bit) >> 16);
}

float f32_from_bf16_bits(std::uint16_t bits) {
  const std::uint32_t widened = static_cast<std::uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof value);
  return value;
}

}  // namespace plexus
