// few_channel_conv's block tiling and which passes it takes: takes_forward,
// takes_backward_weight (few_channel_conv.h), takes_backward_data (few_channel_tiling.h).
// Host logic only, so CPU-only builds link it too.
#include "convolution/few_channel_tiling.h"

#include <algorithm>

#include "convolution/few_channel_conv.h"

namespace plexus::layers::few_channel_conv {

namespace {

bool few_channel_input(const implicit_gemm::ConvProblem& problem) {
  return problem.in_channels >= 1 && problem.in_channels <= kMaxChannels && problem.kernel <= kMaxKernel &&
         problem.in_channels * problem.kernel * problem.kernel <= kMaxTaps && problem.out_channels >= 1;
}

}  // namespace

// Which convolutions the few-channel kernels take (few_channel_conv.h).
bool takes_forward(const implicit_gemm::ConvProblem& problem) { return few_channel_input(problem); }

bool takes_backward_weight(const implicit_gemm::ConvProblem& problem) { return few_channel_input(problem); }

namespace {

long long floor_div(long long a, long long b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
long long round_up(long long a, long long b) { return (a + b - 1) / b * b; }

// Blocks per image for tiles of tile_h x tile_w pixels of X.
long long blocks(const implicit_gemm::ConvProblem& problem, long long tile_h, long long tile_w) {
  return (problem.height + tile_h - 1) / tile_h * ((problem.width + tile_w - 1) / tile_w);
}

// The tiling of `problem` for a variant with `rows` GEMM rows (variant -1
// when no tile fits): the fewest blocks per image; ties: the smallest tile,
// then the widest. Candidate tile widths are s, 2s, ...; for each the
// tallest tile whose region fits the rows (the region grows with the tile).
// col_align: see BackwardDataTiling.
BackwardDataTiling tiling_for_rows(const implicit_gemm::ConvProblem& problem, int rows, int col_align) {
  const long long s = problem.stride, p = problem.padding, k = problem.kernel;
  const long long shift = floor_div(p - k + 1, s);
  // region extent of a tile `extent` pixels long (a multiple of s)
  auto region = [&](long long extent) { return floor_div(extent - 1 + p, s) - shift + 1; };
  auto aligned = [&](long long columns) {
    return col_align == 1 ? columns : round_up(columns + col_align - 1, col_align);
  };
  const long long max_w = round_up(problem.width, s), max_h = round_up(problem.height, s);
  BackwardDataTiling best;
  long long best_blocks = 0;
  for (long long tile_w = s; tile_w <= max_w; tile_w += s) {
    const long long region_w = aligned(region(tile_w));
    if (region_w > rows) break;
    const long long region_h_max = rows / region_w;
    // floor((tile_h - 1 + p)/s) - shift + 1 <= region_h_max  <=>  tile_h <= s*(region_h_max + shift) - p
    long long tile_h = std::min(max_h, floor_div(s * (region_h_max + shift) - p, s) * s);
    if (tile_h < s) continue;
    const long long tile_blocks = blocks(problem, tile_h, tile_w);
    // Ties: the smaller tile (less of it past the image), then the wider one (this later one).
    const long long area = tile_h * tile_w, best_area = static_cast<long long>(best.tile_h) * best.tile_w;
    if (best.variant >= 0 && (tile_blocks > best_blocks || (tile_blocks == best_blocks && area > best_area))) continue;
    best.variant = 0;
    best.tile_h = static_cast<int>(tile_h);
    best.tile_w = static_cast<int>(tile_w);
    best.region_h = static_cast<int>(region(tile_h));
    best.region_w = static_cast<int>(region_w);
    best.row_shift = best.col_shift = static_cast<int>(shift);
    best.col_align = col_align;
    best_blocks = tile_blocks;
  }
  return best;
}

}  // namespace

BackwardDataTiling backward_data_tiling(const implicit_gemm::ConvProblem& problem) {
  if (problem.in_channels < 1 || problem.in_channels > kMaxChannels || problem.stride < 1 || problem.kernel < 1 ||
      problem.kernel > kMaxKernel || problem.height < 1 || problem.width < 1)
    return {};
  const long long columns = problem.in_channels * problem.kernel * problem.kernel;
  // The narrowest variant whose columns hold the weight's, else a wider one
  // whose rows still fit a tile.
  for (int v = 0; v < kBackwardDataVariantCount; ++v) {
    if (columns > kBackwardDataVariants[v].columns) continue;
    BackwardDataTiling tiling = tiling_for_rows(problem, kBackwardDataVariants[v].rows, 1);
    if (tiling.variant < 0) continue;
    if (problem.out_width % 4 == 0) {
      const BackwardDataTiling chunks = tiling_for_rows(problem, kBackwardDataVariants[v].rows, 4);
      if (chunks.variant >= 0 &&
          4 * blocks(problem, chunks.tile_h, chunks.tile_w) <= 5 * blocks(problem, tiling.tile_h, tiling.tile_w))
        tiling = chunks;
    }
    tiling.variant = v;
    return tiling;
  }
  return {};
}

bool takes_backward_data(const implicit_gemm::ConvProblem& problem) {
  return backward_data_tiling(problem).variant >= 0;
}

}  // namespace plexus::layers::few_channel_conv
