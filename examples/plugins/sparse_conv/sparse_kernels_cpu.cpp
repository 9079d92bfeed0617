// The CPU sparse convolution kernels (formulas in sparse_filter.h): plain
// loops (the row kernels spread over images and channels with
// plexus::parallel_for, bit-identical for any thread count), f64 sums, the
// reference the CUDA kernels are compared with.
#include <vector>

#include "plexus/cpu_parallel.h"
#include "plexus/layer.h"
#include "sparse_kernels.h"

namespace sparse_conv {

namespace {

// Rows grouped by small channel a: small[n, a, sy, sx] = sum of W big[n, b, sy s - p + ky, sx s - p + kx].
// One item of plexus::parallel_for per (image, channel): each writes only its own plane.
template <typename T>
void rows_to_small(const TapRows& rows, const ConvGeometry& g, const T* big, T* small) {
  plexus::parallel_for(g.batch * g.small_channels, [&](std::int64_t item) {
    const std::int64_t n = item / g.small_channels, a = item % g.small_channels;
    for (std::int64_t sy = 0; sy < g.small_height; ++sy)
      for (std::int64_t sx = 0; sx < g.small_width; ++sx) {
        double sum = 0;
        for (std::int32_t t = rows.row_start[a]; t < rows.row_start[a + 1]; ++t) {
          const std::int64_t b = rows.tap[t] >> 8, ky = rows.tap[t] >> 4 & 15, kx = rows.tap[t] & 15;
          const std::int64_t y = sy * g.stride - g.padding + ky, x = sx * g.stride - g.padding + kx;
          if (y < 0 || y >= g.big_height || x < 0 || x >= g.big_width) continue;
          sum += rows.value[t] * big[((n * g.big_channels + b) * g.big_height + y) * g.big_width + x];
        }
        small[((n * g.small_channels + a) * g.small_height + sy) * g.small_width + sx] = static_cast<T>(sum);
      }
  });
}

// Rows grouped by big channel b and phase: big[n, b, y, x] = sum of
// W small[n, a, sy, sx] over the taps of row b s^2 + (y mod s) s + (x mod s),
// each of which meets (y, x) at sy = (y + p - ky) / s, sx = (x + p - kx) / s
// (exact divisions) when that lies inside.
template <typename T>
void rows_to_big(const TapRows& rows, const ConvGeometry& g, const T* small, T* big) {
  const std::int64_t s = g.stride;
  plexus::parallel_for(g.batch * g.big_channels, [&](std::int64_t item) {
    const std::int64_t n = item / g.big_channels, b = item % g.big_channels;
    for (std::int64_t y = 0; y < g.big_height; ++y)
      for (std::int64_t x = 0; x < g.big_width; ++x) {
        const std::int64_t row = b * s * s + (y % s) * s + x % s;
        double sum = 0;
        for (std::int32_t t = rows.row_start[row]; t < rows.row_start[row + 1]; ++t) {
          const std::int64_t a = rows.tap[t] >> 8, ky = rows.tap[t] >> 4 & 15, kx = rows.tap[t] & 15;
          const std::int64_t ty = y + g.padding - ky, tx = x + g.padding - kx;
          if (ty < 0 || tx < 0) continue;
          const std::int64_t sy = ty / s, sx = tx / s;
          if (sy >= g.small_height || sx >= g.small_width) continue;
          sum += rows.value[t] * small[((n * g.small_channels + a) * g.small_height + sy) * g.small_width + sx];
        }
        big[((n * g.big_channels + b) * g.big_height + y) * g.big_width + x] = static_cast<T>(sum);
      }
  });
}

// COO: every (non-zero, small pixel) pair adds W * source into the destination.
template <typename T>
void coo_scatter(const CooEntries& coo, const ConvGeometry& g, bool to_small, const T* source, T* destination) {
  const std::int64_t small_size = g.batch * g.small_channels * g.small_height * g.small_width;
  const std::int64_t big_size = g.batch * g.big_channels * g.big_height * g.big_width;
  std::vector<double> sum(static_cast<std::size_t>(to_small ? small_size : big_size), 0.0);
  for (std::size_t i = 0; i < coo.value.size(); ++i)
    for (std::int64_t n = 0; n < g.batch; ++n)
      for (std::int64_t sy = 0; sy < g.small_height; ++sy)
        for (std::int64_t sx = 0; sx < g.small_width; ++sx) {
          const std::int64_t y = sy * g.stride - g.padding + coo.ky[i], x = sx * g.stride - g.padding + coo.kx[i];
          if (y < 0 || y >= g.big_height || x < 0 || x >= g.big_width) continue;
          const std::int64_t s =
              ((n * g.small_channels + coo.small_channel[i]) * g.small_height + sy) * g.small_width + sx;
          const std::int64_t b = ((n * g.big_channels + coo.big_channel[i]) * g.big_height + y) * g.big_width + x;
          if (to_small) sum[s] += coo.value[i] * source[b];
          else sum[b] += coo.value[i] * source[s];
        }
  for (std::size_t e = 0; e < sum.size(); ++e) destination[e] = static_cast<T>(sum[e]);
}

}  // namespace

void to_small_cpu(const SparseFilter& filter, SparseFormat format, const ConvGeometry& g, const plexus::Tensor& big,
                  plexus::Tensor& small) {
  plexus::dispatch_float(big.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (format == SparseFormat::rows) rows_to_small(filter.by_small, g, big.data<T>(), small.data<T>());
    else coo_scatter(filter.coo, g, true, big.data<T>(), small.data<T>());
  });
}

void to_big_cpu(const SparseFilter& filter, SparseFormat format, const ConvGeometry& g, const plexus::Tensor& small,
                plexus::Tensor& big) {
  plexus::dispatch_float(small.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (format == SparseFormat::rows) rows_to_big(filter.by_big, g, small.data<T>(), big.data<T>());
    else coo_scatter(filter.coo, g, false, small.data<T>(), big.data<T>());
  });
}

}  // namespace sparse_conv
