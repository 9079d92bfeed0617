// Building the sparse formats of sparse_filter.h.
#include "sparse_filter.h"

namespace sparse_conv {

namespace {

// (v mod s) in [0, s) for any sign of v.
std::int64_t positive_mod(std::int64_t v, std::int64_t s) { return ((v % s) + s) % s; }

// Groups the COO entries by destination row: the small channel, or the big
// channel and phase (sparse_filter.h).
TapRows group_rows(const CooEntries& coo, std::int64_t rows, bool by_small, std::int64_t stride, std::int64_t padding) {
  TapRows result;
  result.row_start.assign(static_cast<std::size_t>(rows) + 1, 0);
  const std::size_t n = coo.value.size();
  auto row_of = [&](std::size_t i) -> std::int32_t {
    if (by_small) return coo.small_channel[i];
    const std::int64_t phase =
        positive_mod(coo.ky[i] - padding, stride) * stride + positive_mod(coo.kx[i] - padding, stride);
    return static_cast<std::int32_t>(coo.big_channel[i] * stride * stride + phase);
  };
  for (std::size_t i = 0; i < n; ++i) ++result.row_start[row_of(i) + 1];
  for (std::int64_t r = 0; r < rows; ++r) result.row_start[r + 1] += result.row_start[r];
  result.value.resize(n);
  result.tap.resize(n);
  std::vector<std::int32_t> next(result.row_start.begin(), result.row_start.end() - 1);
  // Entries arrive in row-major weight order, so within a row the taps are
  // sorted by source channel, then ky, kx: neighbouring taps read
  // neighbouring source memory.
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t row = row_of(i);
    const std::int32_t source = by_small ? coo.big_channel[i] : coo.small_channel[i];
    const std::size_t at = static_cast<std::size_t>(next[row]++);
    result.value[at] = coo.value[i];
    result.tap[at] = static_cast<std::uint16_t>(source << 8 | coo.ky[i] << 4 | coo.kx[i]);
  }
  return result;
}

}  // namespace

SparseFilter build_sparse_filter(const std::vector<double>& weight, std::int64_t small_channels,
                                 std::int64_t big_channels, std::int64_t kernel, std::int64_t stride,
                                 std::int64_t padding) {
  SparseFilter filter;
  filter.stride = stride;
  filter.padding = padding;
  filter.small_channels = small_channels;
  filter.big_channels = big_channels;
  filter.kernel = kernel;
  std::size_t i = 0;
  for (std::int32_t a = 0; a < small_channels; ++a)
    for (std::int32_t b = 0; b < big_channels; ++b)
      for (std::int32_t ky = 0; ky < kernel; ++ky)
        for (std::int32_t kx = 0; kx < kernel; ++kx, ++i) {
          if (weight[i] == 0.0) continue;
          filter.coo.value.push_back(weight[i]);
          filter.coo.small_channel.push_back(a);
          filter.coo.big_channel.push_back(b);
          filter.coo.ky.push_back(ky);
          filter.coo.kx.push_back(kx);
        }
  filter.has_rows = small_channels <= kMaxRowChannels && big_channels <= kMaxRowChannels && kernel <= kMaxRowKernel;
  if (filter.has_rows) {
    filter.by_small = group_rows(filter.coo, small_channels, true, stride, padding);
    filter.by_big = group_rows(filter.coo, big_channels * stride * stride, false, stride, padding);
  }
  return filter;
}

std::int64_t coo_bytes(std::int64_t nonzeros, std::int64_t value_bytes) { return nonzeros * (value_bytes + 16); }

std::int64_t rows_bytes(std::int64_t nonzeros, std::int64_t rows, std::int64_t value_bytes) {
  return nonzeros * (value_bytes + 2) + (rows + 1) * 4;
}

}  // namespace sparse_conv
