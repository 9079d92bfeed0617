// Building the sparse formats of sparse_filter.h.
#include "sparse_filter.h"

namespace sparse_conv {

namespace {

// Groups the COO entries by one channel (the destination of a direction).
TapRows group_rows(const CooEntries& coo, std::int64_t rows, bool by_small) {
  TapRows result;
  result.row_start.assign(static_cast<std::size_t>(rows) + 1, 0);
  const std::size_t n = coo.value.size();
  for (std::size_t i = 0; i < n; ++i) ++result.row_start[(by_small ? coo.small_channel[i] : coo.big_channel[i]) + 1];
  for (std::int64_t r = 0; r < rows; ++r) result.row_start[r + 1] += result.row_start[r];
  result.value.resize(n);
  result.tap.resize(n);
  std::vector<std::int32_t> next(result.row_start.begin(), result.row_start.end() - 1);
  // Entries arrive in row-major weight order, so within a row the taps are
  // sorted by source channel, then ky, kx: neighbouring taps read
  // neighbouring source memory.
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t row = by_small ? coo.small_channel[i] : coo.big_channel[i];
    const std::int32_t source = by_small ? coo.big_channel[i] : coo.small_channel[i];
    const std::size_t at = static_cast<std::size_t>(next[row]++);
    result.value[at] = coo.value[i];
    result.tap[at] = static_cast<std::uint16_t>(source << 8 | coo.ky[i] << 4 | coo.kx[i]);
  }
  return result;
}

}  // namespace

SparseFilter build_sparse_filter(const std::vector<double>& weight, std::int64_t small_channels,
                                 std::int64_t big_channels, std::int64_t kernel) {
  SparseFilter filter;
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
    filter.by_small = group_rows(filter.coo, small_channels, true);
    filter.by_big = group_rows(filter.coo, big_channels, false);
  }
  return filter;
}

std::int64_t coo_bytes(std::int64_t nonzeros, std::int64_t value_bytes) { return nonzeros * (value_bytes + 16); }

std::int64_t rows_bytes(std::int64_t nonzeros, std::int64_t rows, std::int64_t value_bytes) {
  return nonzeros * (value_bytes + 2) + (rows + 1) * 4;
}

}  // namespace sparse_conv
