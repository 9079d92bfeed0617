#pragma once
// How few_channel_conv::backward_data (few_channel_backward_data.cu) cuts a
// problem into thread blocks. Host logic only (few_channel_tiling.cpp), so
// CPU-only builds link takes_backward_data too.
//
// A block owns a tile_h x tile_w tile of one image of X (the few-channel
// side), with tile_h and tile_w multiples of the stride so every tile starts
// on phase (0, 0). Output row h reads Y rows (h + p - i)/s for the taps i
// with s | h + p - i, i.e. rows floor((h + p - k + 1)/s) .. floor((h + p)/s),
// so the tile starting at row h0 reads the region of Y rows
//   h0/s + row_shift .. h0/s + row_shift + region_h - 1,
//   row_shift = floor((p - k + 1)/s), region_h = floor((tile_h - 1 + p)/s) - row_shift + 1
// (likewise for columns, see col_align). The block computes the product of that region of
// Y with the whole weight (one GEMM row per region pixel), so region_h *
// region_w is at most the block's GEMM rows (the variant's rows), and the
// weight's columns Ci*k*k at most its GEMM columns.
#include "convolution/few_channel_conv.h"

namespace plexus::layers::few_channel_conv {

// The kernel's shapes of a block's GEMM (rows = Y pixels of the region,
// columns = the weight's Ci*k*k): few_channel_backward_data.cu instantiates
// one kernel per variant, with these sizes.
struct BackwardDataVariant {
  int rows, columns;
};
inline constexpr BackwardDataVariant kBackwardDataVariants[] = {{256, 32}, {256, 80}, {64, 256}};
inline constexpr int kBackwardDataVariantCount = 3;

struct BackwardDataTiling {
  int variant = -1;  // index into kBackwardDataVariants; -1: the problem is not taken
  int tile_h = 0, tile_w = 0;
  int region_h = 0, region_w = 0;
  int row_shift = 0, col_shift = 0;
  // 4: the region's first column is rounded down to a multiple of 4 and
  // region_w is a multiple of 4 (with up to 3 columns of slack), so a row of
  // the region is whole 16-byte chunks of Y (taken when Y's width is a
  // multiple of 4 and this costs at most 1/4 more blocks); else 1.
  int col_align = 1;
};

// The tiling with the fewest blocks per image (ties: the smallest tile,
// then the widest, for longer contiguous rows of Y), or variant -1 when X
// has more than kMaxChannels channels, the kernel exceeds kMaxKernel, the
// weight is wider than every variant, or no tile's region fits a variant's
// rows (e.g. kernel 9 at stride 1).
BackwardDataTiling backward_data_tiling(const implicit_gemm::ConvProblem& problem);

}  // namespace plexus::layers::few_channel_conv
