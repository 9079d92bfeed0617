#pragma once
// IEEE 754 binary16 ("half", f16): 1 sign bit, 5 exponent bits (bias 15),
// 10 mantissa bits; largest finite value 65504, smallest subnormal 2^-24.
// Used to store weights at half the size (safetensors dtype "F16"); every
// f16 value is exactly an f32 value, so loading is exact, and storing an
// f32 rounds it to the nearest f16, ties to the even mantissa (the IEEE
// default, what numpy's astype(float16) and PyTorch's .half() do).
#include <cstdint>

#include "plexus/tensor.h"

namespace plexus {

// Round to the nearest f16, ties to even. Beyond the largest finite f16
// (|value| >= 65520) the result is +-infinity; NaN stays NaN.
std::uint16_t f16_bits_from_f32(float value);
// Exact.
float f32_from_f16_bits(std::uint16_t bits);

// The values of `tensor` (f32 or f64, any device) rounded to the nearest
// f16, as an f32 tensor on the CPU. Throws Error naming `name`, the element
// and its value when one is not finite or does not fit in f16.
Tensor round_to_f16(const Tensor& tensor, const std::string& name);

}  // namespace plexus
