#pragma once
// A pruned convolution filter in two sparse formats.
//
// Both Conv2d and ConvTranspose2d pair a pixel (sy, sx) of their "small"
// side with the pixels (sy s - p + ky, sx s - p + kx) of their "big" side,
// through a weight W[small channel][big channel][ky][kx]: Conv2d's weight
// [out, in, k, k] (small = output), ConvTranspose2d's [in, out, k, k]
// (small = input). So one filter serves both layers and both directions:
//   Conv2d forward, ConvTranspose2d input gradient:  big -> small
//     small[n, a, sy, sx] = sum over non-zeros (a, b, ky, kx) of W big[n, b, sy s - p + ky, sx s - p + kx]
//   ConvTranspose2d forward, Conv2d input gradient:  small -> big
//     big[n, b, y, x]     = sum over non-zeros (a, b, ky, kx) with y = sy s - p + ky, x = sx s - p + kx of W small[n,
//     a, sy, sx]
//
// COO: one entry per non-zero, (value, small channel, big channel, ky, kx),
//   4 int32 indices: sizeof(T) + 16 bytes per non-zero. A kernel visits
//   (non-zero, pixel) pairs and scatters into its destination with atomic
//   adds (several non-zeros hit one output element).
// Rows (this plugin's compact layout, in the spirit of "FAST"): the
//   non-zeros grouped by destination channel, a row pointer per channel
//   (int32) and per non-zero its value and a 16-bit tap code
//   (source channel << 8 | ky << 4 | kx): sizeof(T) + 2 bytes per non-zero,
//   plus 4 bytes per row. A kernel gives each destination element one
//   thread that walks its channel's row: no atomics, a deterministic sum,
//   every thread of a block reading the same tap (a broadcast) and
//   neighbouring source pixels. The filter keeps two row sets, one per
//   direction: grouped by small channel (taps name big channels), and by
//   big channel AND phase (taps name small channels). A big pixel (y, x)
//   meets only the taps with ky = y + p (mod s) and kx = x + p (mod s), so
//   the big-side rows are split into s^2 phase rows, row b s^2 + (y mod s) s
//   + (x mod s) holding the taps with ((ky - p) mod s, (kx - p) mod s) =
//   (y mod s, x mod s): a thread walks only taps that meet its pixel
//   instead of testing s^2 times as many. Needs channels <= 256, kernel <= 16.
#include <cstdint>
#include <string>
#include <vector>

namespace sparse_conv {

struct CooEntries {
  std::vector<double> value;
  std::vector<std::int32_t> small_channel, big_channel, ky, kx;
};

struct TapRows {
  std::vector<std::int32_t> row_start;  // rows + 1 entries
  std::vector<double> value;
  std::vector<std::uint16_t> tap;  // source channel << 8 | ky << 4 | kx
};

inline constexpr int kMaxRowChannels = 256;
inline constexpr int kMaxRowKernel = 16;

struct SparseFilter {
  std::int64_t small_channels = 0, big_channels = 0, kernel = 0, stride = 1, padding = 0;
  CooEntries coo;
  bool has_rows = false;  // false when the channels or kernel exceed the tap code
  TapRows by_small;       // small_channels rows
  TapRows by_big;         // big_channels * stride^2 rows: b stride^2 + phase_y stride + phase_x
  std::int64_t nonzeros() const { return static_cast<std::int64_t>(coo.value.size()); }
};

// From a dense weight [small, big, k, k] (row-major) of a convolution with
// `stride` and `padding`: every non-zero, in row-major order of the weight.
SparseFilter build_sparse_filter(const std::vector<double>& weight, std::int64_t small_channels,
                                 std::int64_t big_channels, std::int64_t kernel, std::int64_t stride = 1,
                                 std::int64_t padding = 0);

// Bytes of each format for `nonzeros` non-zeros of `value_bytes` each.
std::int64_t coo_bytes(std::int64_t nonzeros, std::int64_t value_bytes);
std::int64_t rows_bytes(std::int64_t nonzeros, std::int64_t rows, std::int64_t value_bytes);

// The pairing geometry of one convolution (see above).
struct ConvGeometry {
  std::int64_t batch = 0, small_channels = 0, big_channels = 0;
  std::int64_t small_height = 0, small_width = 0, big_height = 0, big_width = 0;
  std::int64_t kernel = 0, stride = 1, padding = 0;
};

}  // namespace sparse_conv
