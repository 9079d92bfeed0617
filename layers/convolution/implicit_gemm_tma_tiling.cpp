// The TMA-fed gather's tiling (implicit_gemm_tma_tiling.h).
#include "convolution/implicit_gemm_tma_tiling.h"

#include <algorithm>
#include <climits>

#include "convolution/implicit_gemm.h"

namespace plexus::layers::implicit_gemm::detail {

namespace {

constexpr int kColumns = 128;  // columns of a block's tile of C
constexpr int kMaxBox = 256;   // elements of a TMA box along one dimension
constexpr int kMaxParts = 16;

int power_of_two_at_least(int value) {
  int power = 1;
  while (power < value) power *= 2;
  return power;
}

}  // namespace

bool tma_gather_tiling(int batch, int source_scale, const GridSize* grids, int parts, TmaTiling& tiling) {
  tiling = TmaTiling{};
  if (batch < 1 || source_scale < 1 || parts < 1 || parts > kMaxParts) return false;
  int grid_h = 1, grid_w = 1;
  long long points = 0;
  for (int p = 0; p < parts; ++p) {
    grid_h = std::max(grid_h, grids[p].h);
    grid_w = std::max(grid_w, grids[p].w);
    points += static_cast<long long>(batch) * grids[p].h * grids[p].w;
  }
  tiling.tile_w = std::min(power_of_two_at_least(grid_w), kColumns);
  tiling.tile_h = std::min(power_of_two_at_least(grid_h), kColumns / tiling.tile_w);
  tiling.tile_n = kColumns / (tiling.tile_w * tiling.tile_h);
  tiling.tiles_w = static_cast<int>(ceil_div(grid_w, tiling.tile_w));
  tiling.tiles_h = static_cast<int>(ceil_div(grid_h, tiling.tile_h));
  tiling.rectangles = ceil_div(batch, tiling.tile_n) * tiling.tiles_h * tiling.tiles_w;
  if (static_cast<long long>(tiling.tile_w) * source_scale > kMaxBox ||
      static_cast<long long>(tiling.tile_h) * source_scale > kMaxBox)
    return false;
  return points * 8 >= tiling.rectangles * kColumns * parts * 7 && tiling.rectangles * parts <= INT_MAX;
}

}  // namespace plexus::layers::implicit_gemm::detail
