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

// A convolution node as the kernels read it.
struct ConvView {
  const std::int32_t* weight;  // [C, O, k, k] transposed, [O, C, k, k] otherwise
  const std::int64_t* bias;    // [O]
  int transposed, in_channels, out_channels, kernel, stride, padding;
  std::int64_t in_height, in_width;
};

// acc[o, y, x] = B[o] + sum_{c, i, j} V q[c, y(i), x(j)], a gather over the
// taps that reach (y, x). Exact in int64 under check_network's bounds, so
// the order of the sum does not matter.
PLEXUS_INTEGER_FUNCTION std::int64_t accumulate(const ConvView& l, const std::int64_t* q, std::int64_t o,
                                                std::int64_t y, std::int64_t x) {
  const std::int64_t k = l.kernel, s = l.stride, p = l.padding, channels = l.in_channels, outs = l.out_channels;
  std::int64_t acc = l.bias[o];
  for (std::int64_t i = 0; i < k; ++i) {
    std::int64_t a;
    if (l.transposed) {
      const std::int64_t t = y + p - i;
      if (t < 0 || t % s != 0) continue;
      a = t / s;
    } else {
      a = y * s - p + i;
    }
    if (a < 0 || a >= l.in_height) continue;
    for (std::int64_t j = 0; j < k; ++j) {
      std::int64_t b;
      if (l.transposed) {
        const std::int64_t t = x + p - j;
        if (t < 0 || t % s != 0) continue;
        b = t / s;
      } else {
        b = x * s - p + j;
      }
      if (b < 0 || b >= l.in_width) continue;
      for (std::int64_t c = 0; c < channels; ++c) {
        const std::int64_t v = l.transposed ? l.weight[((c * outs + o) * k + i) * k + j]
                                            : l.weight[((o * channels + c) * k + i) * k + j];
        acc += v * q[(c * l.in_height + a) * l.in_width + b];
      }
    }
  }
  return acc;
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

}  // namespace plexus::codec::arithmetic

#undef PLEXUS_INTEGER_FUNCTION
