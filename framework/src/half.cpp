#include "plexus/half.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "plexus/error.h"

namespace plexus {

std::uint16_t f16_bits_from_f32(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u)  // infinity, or NaN (kept quiet)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x0200u : 0u));
  const int exponent = static_cast<int>(magnitude >> 23) - 127 + 15;  // the f16 biased exponent
  if (exponent <= 0) {
    // Below 2^-14: an f16 subnormal m * 2^-24. |value| * 2^24 is exact in
    // f32; nearbyint rounds it to the nearest integer, ties to even (the
    // default rounding mode). m = 1024 is the smallest normal, 0x0400.
    float magnitude_value = 0;
    std::memcpy(&magnitude_value, &magnitude, sizeof magnitude_value);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(magnitude_value * 16777216.0f)));
  }
  if (exponent >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 2^16: infinity
  // Normal: keep the top 10 of 23 mantissa bits; round the dropped 13 bits
  // to nearest, ties to even. A carry out of the mantissa raises the
  // exponent, which is again the right encoding (up to infinity, 0x7c00).
  std::uint32_t half = (static_cast<std::uint32_t>(exponent) << 10) | ((magnitude & 0x7fffffu) >> 13);
  const std::uint32_t dropped = magnitude & 0x1fffu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (half & 1u))) ++half;
  return static_cast<std::uint16_t>(sign | half);
}

float f32_from_f16_bits(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  std::uint32_t out = 0;
  if (exponent == 31) out = sign | 0x7f800000u | (mantissa << 13);  // infinity or NaN
  else out = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  float value = 0;
  std::memcpy(&value, &out, sizeof value);
  return value;
}

Tensor round_to_f16(const Tensor& tensor, const std::string& name) {
  const std::vector<double> values = tensor.to_values();
  std::vector<double> rounded(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float value = static_cast<float>(values[i]);
    const float half = f32_from_f16_bits(f16_bits_from_f32(value));
    if (!std::isfinite(values[i]) || !std::isfinite(half)) {
      std::ostringstream text;
      text << "tensor '" << name << "' element " << i << " is " << values[i]
           << ", which f16 storage cannot hold (finite values up to 65504 in magnitude)";
      throw Error(text.str());
    }
    rounded[i] = half;
  }
  return Tensor::from_values(rounded, tensor.shape(), DType::f32);
}

}  // namespace plexus
