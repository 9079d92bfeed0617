#pragma once
// bfloat16 (bf16): the upper half of an IEEE 754 binary32: 1 sign bit, the
// same 8 exponent bits (bias 127, so the same range as f32) and 7 mantissa
// bits (8 significant bits: a unit roundoff of 2^-8). Tensors of DType::bf16
// hold BFloat16 elements: half the bytes of f32, for storing activations
// between kernels that compute in f32. Every bf16 value is exactly an f32
// value, so widening is exact; narrowing rounds to the nearest bf16, ties
// to the even mantissa (what PyTorch's .bfloat16() and CUDA's
// __float2bfloat16_rn do).
#include <cstdint>

namespace plexus {

// Nearest bf16, ties to even. Values beyond the largest finite bf16
// (|value| >= 0x1.ffp127, halfway above 0x1.fep127) become +-infinity;
// infinities stay; a NaN becomes a quiet NaN of the same sign.
std::uint16_t bf16_bits_from_f32(float value);
// Exact.
float f32_from_bf16_bits(std::uint16_t bits);

}  // namespace plexus
