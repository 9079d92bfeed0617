#pragma once
// Host-side elements of f32, f64 and bf16 tensors as doubles: read exactly
// (every f32 and bf16 value is a double), and stored rounded to nearest
// even (bf16 through f32: a double rounded to f32, then to bf16, can differ
// from the double rounded to bf16 directly only when the first rounding
// lands exactly halfway between two bf16 values).
#include "plexus/bfloat16.h"
#include "plexus/tensor.h"

namespace plexus {

inline double element_value(float value) { return value; }
inline double element_value(double value) { return value; }
inline double element_value(BFloat16 value) { return f32_from_bf16_bits(value.bits); }

inline void store_element(float& out, double value) { out = static_cast<float>(value); }
inline void store_element(double& out, double value) { out = value; }
inline void store_element(BFloat16& out, double value) { out.bits = bf16_bits_from_f32(static_cast<float>(value)); }

}  // namespace plexus
