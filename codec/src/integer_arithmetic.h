#pragma once
// The per-element formulas of the integer network (plexus/codec/integer_network.h),
// compiled for the CPU and, in integer_network.cu, for the GPU: one
// definition, so both devices compute the same integers by construction.
#include <cstdint>

#ifdef __CUDACC__
#define PLEXUS_INTEGER_FUNCTION __host__ __device__ inline
#else
#define PLEXUS_INTEGER_FUNCTION inline
#endif

namespace plexus::codec::arithmetic {

constexpr std::int64_t kActivationMax = 32767;
constexpr std::int64_t kMeanMagnitudeMax = std::int64_t(1) << 31;
constexpr std::int64_t kFixedPointMax = std::int64_t(1) << 31;

// A convolution's geometry as the im2col kernels read it.
struct ConvGeometry {
  int transposed, in_channels, kernel, stride, padding;
  std::int64_t in_height, in_width, out_width;
};

// The input element (c, a, b) that tap (i, j) of output position (y, x)
// reads, as the index (c * in_height + a) * in_width + b, or -1 where it
// reads none (padding, or a transposed convolution's stride gap):
//   Conv2d          a = y s - p + i,  b = x s - p + j;
//   ConvTranspose2d a = (y + p - i) / s, b = (x + p - j) / s, where divisible.
PLEXUS_INTEGER_FUNCTION std::int64_t tap_source(const ConvGeometry& g, std::int64_t c, std::int64_t i, std::int64_t j,
                                                std::int64_t y, std::int64_t x) {
  std::int64_t a, b;
  if (g.transposed) {
    const std::int64_t ty = y + g.padding - i, tx = x + g.padding - j;
    if (ty < 0 || tx < 0 || ty % g.stride != 0 || tx % g.stride != 0) return -1;
    a = ty / g.stride;
    b = tx / g.stride;
  } else {
    a = y * g.stride - g.padding + i;
    b = x * g.stride - g.padding + j;
  }
  if (a < 0 || a >= g.in_height || b < 0 || b >= g.in_width) return -1;
  return (c * g.in_height + a) * g.in_width + b;
}

// Column `p` (output position p = y * out_width + x) of the im2col matrix,
// row r = (c * k + i) * k + j: the input value that tap reads, or 0.
PLEXUS_INTEGER_FUNCTION double im2col_value(const ConvGeometry& g, const std::int64_t* q, std::int64_t r,
                                            std::int64_t p) {
  const std::int64_t k = g.kernel;
  const std::int64_t source = tap_source(g, r / (k * k), r / k % k, r % k, p / g.out_width, p % g.out_width);
  return source < 0 ? 0.0 : static_cast<double>(q[source]);
}

// (m * multiplier + 2^(shift-1)) >> shift for m >= 0 (no rounding term for
// shift 0), capped at `cap`.
PLEXUS_INTEGER_FUNCTION std::int64_t scaled_magnitude(std::int64_t m, std::int64_t multiplier, std::int32_t shift,
                                                      std::int64_t cap) {
  const std::int64_t rounding = shift > 0 ? std::int64_t(1) << (shift - 1) : 0;
  const std::int64_t v = (m * multiplier + rounding) >> shift;
  return v < cap ? v : cap;
}

// The rescale node: q = min((acc M + r) >> S, 32767) for acc > 0, and
// -min((-acc N + r) >> S, 32767) otherwise.
PLEXUS_INTEGER_FUNCTION std::int64_t rescale(std::int64_t acc, std::int64_t multiplier,
                                             std::int64_t negative_multiplier, std::int32_t shift) {
  return acc > 0 ? scaled_magnitude(acc, multiplier, shift, kActivationMax)
                 : -scaled_magnitude(-acc, negative_multiplier, shift, kActivationMax);
}

// #{ i < count : v > T[i] }: the table index of a scale.
PLEXUS_INTEGER_FUNCTION std::int32_t table_index(std::int64_t v, const std::int64_t* thresholds, std::int32_t count) {
  std::int32_t index = 0;
  for (std::int32_t i = 0; i < count; ++i) index += v > thresholds[i];
  return index;
}

// A mean in units of 2^-16: sign(v) min((|v| K + r) >> R, 2^31), rounding
// halves away from zero so that the result is odd in v.
PLEXUS_INTEGER_FUNCTION std::int64_t fixed_mean(std::int64_t v, std::int64_t multiplier, std::int32_t shift) {
  return v >= 0 ? scaled_magnitude(v, multiplier, shift, kMeanMagnitudeMax)
                : -scaled_magnitude(-v, multiplier, shift, kMeanMagnitudeMax);
}

// A fixed-point value clamped to +-2^31.
PLEXUS_INTEGER_FUNCTION std::int64_t clamp_fixed(std::int64_t v) {
  return v > kFixedPointMax ? kFixedPointMax : (v < -kFixedPointMax ? -kFixedPointMax : v);
}

// The tanh node: sign(acc) T[min((|acc| M + r) >> S, L - 1)].
PLEXUS_INTEGER_FUNCTION std::int64_t table_tanh(std::int64_t acc, std::int64_t multiplier, std::int32_t shift,
                                                const std::int64_t* table, std::int32_t entries) {
  const std::int64_t magnitude = acc >= 0 ? acc : -acc;
  const std::int64_t value = table[scaled_magnitude(magnitude, multiplier, shift, entries - 1)];
  return acc >= 0 ? value : -value;
}

// The checkerboard_mask node: whether position (y, x) is kept, (y + x) mod 2 = parity.
PLEXUS_INTEGER_FUNCTION bool checkerboard_kept(std::int64_t y, std::int64_t x, std::int32_t parity) {
  return ((y + x) & 1) == parity;
}

// The input position that tap t = i k + j of a stride-1 convolution of
// padding p reads for output (y, x) of a height x width plane: (y - p + i) *
// width + (x - p + j), or -1 outside it (an autoregressive context's taps).
PLEXUS_INTEGER_FUNCTION std::int64_t same_size_tap(std::int64_t y, std::int64_t x, std::int32_t tap,
                                                   std::int32_t kernel, std::int32_t padding, std::int64_t height,
                                                   std::int64_t width) {
  const std::int64_t a = y - padding + tap / kernel, b = x - padding + tap % kernel;
  return a < 0 || a >= height || b < 0 || b >= width ? -1 : a * width + b;
}

}  // namespace plexus::codec::arithmetic

#undef PLEXUS_INTEGER_FUNCTION
