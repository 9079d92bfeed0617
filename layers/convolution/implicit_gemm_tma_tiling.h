#pragma once
// How the TMA-fed gather (implicit_gemm_wgmma_tma.cu) tiles the columns of
// its GEMM: a block's 128 columns are a rectangle of tile_n images x tile_h
// rows x tile_w points of a part's grid (powers of two, tile_w as wide as
// the grid up to 128, then tile_h as tall up to 128 / tile_w), since the
// TMA brings a box of the source per tap, and `rectangles` of them
// (tiles_w across, tiles_h down, then the images) cover the largest part's
// grid and the batch. Host code, no CUDA.

namespace plexus::layers::implicit_gemm::detail {

struct TmaTiling {
  int tile_w = 0, tile_h = 0, tile_n = 0;
  int tiles_w = 0, tiles_h = 0;
  long long rectangles = 0;
};

// A part's grid of destination points (implicit_gemm_gather.cuh).
struct GridSize {
  int h = 0, w = 0;
};

// Fills `tiling` for `parts` grids of `batch` images whose source pixels
// lie source_scale apart, and returns whether the TMA-fed kernel takes it:
// 1 to 16 parts, boxes within the TMA's 256 elements a dimension (tile_w
// and tile_h times source_scale), and rectangles that leave at most an
// eighth of their columns past the grids and the batch.
bool tma_gather_tiling(int batch, int source_scale, const GridSize* grids, int parts, TmaTiling& tiling);

}  // namespace plexus::layers::implicit_gemm::detail
