// The gather GEMM of implicit_gemm_gather.cuh on Hopper with both operands
// brought by the TMA, so that no thread spends instructions on copies: the
// packed weight [m_pad][k_stride] of a part as boxes of 128 rows x one
// 128-byte row of K, the NHWC source (implicit_gemm_gather.cuh) as boxes of
// one tap's stage of channels over a rectangle of a part's grid. A block's
// 128 columns are tile_n images x tile_h rows x tile_w points of the grid
// (powers of two, rows innermost-last), whose source pixels for tap (ti, tj)
//   (u * source_scale + source_row0 + tap_step * ti, v * source_scale + source_col0 + tap_step * tj)
// form a box of the source's (channel, column, row, image) dimensions taken
// every source_scale-th row and column from its corner, which the TMA
// loads with element strides, zeros outside the image (the padding). Both
// boxes land 128-byte swizzled, the layout wgmma reads (wgmma.cuh). One
// producer thread issues them into a 3-deep ring behind per-slot `full` and
// `empty` mbarriers; two consumer warpgroups issue the wgmmas and keep one
// stage of them in flight (as the weight gradient's kernel,
// implicit_gemm_wgmma_weight_grad.cu). The copies into shared memory by every
// thread (implicit_gemm_wgmma.cu) cost a stage about 16 instructions a row,
// which held that kernel's tensor cores below half their rate.
//
// This file is compiled for sm_90a alone when the build includes Hopper
// (PLEXUS_CONV_WGMMA); otherwise run_wgmma_tma_gather declines every problem.
#include <cuda.h>

#include <algorithm>
#include <cstdint>

#include "convolution/implicit_gemm_gather.cuh"
#include "convolution/implicit_gemm_tma_tiling.h"
#include "convolution/tensor_maps.h"
#include "convolution/wgmma.cuh"

namespace plexus::layers::implicit_gemm::detail {

#if defined(PLEXUS_CONV_WGMMA)
namespace {

constexpr int kRowBytes = kWgmmaRowBytes;
constexpr int kTileRows = kWgmmaTileRows;
constexpr int kTileBytes = kWgmmaTileBytes;
constexpr int kStages = 3;  // 3 x 32 KiB: two blocks per multiprocessor
constexpr int kSwizzleAlign = kWgmmaSwizzleAlign;
constexpr int kConsumerThreads = 256;
constexpr int kTmaThreads = kConsumerThreads + 32;  // two consumer warpgroups and one producer warp

// The NHWC source's map and each part's packed weight's.
struct TmaGatherMaps {
  CUtensorMap source;
  CUtensorMap weight[kMaxPhases];
};

// grid = (rectangles x parts, M tiles, K splits), the part varying fastest
// (as gather_block: the phases of one rectangle side by side).
template <bool bf16>
__global__ void __launch_bounds__(kTmaThreads, 2)
    wgmma_tma_gather_kernel(const __grid_constant__ TmaGatherMaps maps, const __grid_constant__ GatherParams params,
                            const TmaTiling tiling) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kTileK = kRowBytes / (bf16 ? 2 : 4);
  using T = WgmmaGatherTile<kTileK, kStages>;
  static_assert(T::MT == 1 && T::NT == 16 && T::BM == kTileRows && T::BN == kTileRows,
                "two warpgroups of m64n128 over 128-row tiles");
  const int part_index = static_cast<int>(blockIdx.x) % params.part_count;
  const GatherPart& part = params.parts[part_index];
  const int rectangle = static_cast<int>(blockIdx.x) / params.part_count;
  const int tw = rectangle % tiling.tiles_w, rest = rectangle / tiling.tiles_w;
  const int th = rest % tiling.tiles_h, tn = rest / tiling.tiles_h;
  const int n0 = tn * tiling.tile_n, u0 = th * tiling.tile_h, v0 = tw * tiling.tile_w;
  const int m0 = static_cast<int>(blockIdx.y) * kTileRows, split = static_cast<int>(blockIdx.z);
  const int all_k_tiles = part.k_stride / kTileK;
  const int tiles_per_split = (all_k_tiles + params.splits - 1) / params.splits;
  const int k_first = min(all_k_tiles, split * tiles_per_split);
  const int k_tiles = min(all_k_tiles, k_first + tiles_per_split) - k_first;  // may be 0: writes zeros

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const unsigned shared_base = shared_address(shared_bytes);
  const unsigned skip = (kSwizzleAlign - (shared_base & (kSwizzleAlign - 1))) & (kSwizzleAlign - 1);
  unsigned char* ring_bytes = shared_bytes + skip;
  const unsigned ring = shared_base + skip;  // kStages A slots, then kStages B slots
  // kStages `full` mbarriers of 8 bytes after the slots, then kStages `empty`.
  const TmaRing<kStages> slots{ring + 2 * kStages * kTileBytes, ring + 2 * kStages * kTileBytes + 8 * kStages};
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  slots.init(kConsumerThreads / 32);
  __syncthreads();

  if (warp == kConsumerThreads / 32) {
    // Producer: tile k is K tile k_first + k = channels [c0, c0 + kTileK) of one tap.
    if (lane == 0) {
      const int tiles_per_tap = params.channel_pad / kTileK, scale = params.source_scale;
      for (int k = 0; k < k_tiles; ++k) {
        const int stage = slots.acquire(k, 2 * kTileBytes), k_tile = k_first + k;
        const int tap = k_tile / tiles_per_tap, c0 = (k_tile - tap * tiles_per_tap) * kTileK;
        const int ti = tap / part.taps_w, tj = tap - ti * part.taps_w;
        const unsigned full = slots.full + 8 * stage;
        tma_load_2d(ring + stage * kTileBytes, &maps.weight[part_index], k_tile * kTileK, m0, full);
        tma_load_4d(ring + (kStages + stage) * kTileBytes, &maps.source, c0,
                    v0 * scale + part.source_col0 + part.tap_step * tj,
                    u0 * scale + part.source_row0 + part.tap_step * ti, n0, full);
      }
    }
    return;
  }

  // Consumers: warpgroup w multiplies rows 64w..64w+63 of A by all of B.
  const int warpgroup = warp / 4;
  float acc[1][16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[0][j][e] = 0.0f;
  slots.consume(k_tiles, acc[0], [&](int stage) {
    const std::uint64_t a = swizzled_descriptor(ring + stage * kTileBytes + warpgroup * (kTileBytes / 2));
    const std::uint64_t b = swizzled_descriptor(ring + (kStages + stage) * kTileBytes);
#pragma unroll
    for (int step = 0; step < kRowBytes / 32; ++step) {
      if constexpr (bf16) wgmma_bf16(acc[0], a + 2 * step, b + 2 * step);
      else wgmma_tf32(acc[0], a + 2 * step, b + 2 * step);
    }
  });

  // Column c of the tile: point (u0 + row, v0 + column) of image n0 + image
  // of the rectangle, c = (image * tile_h + row) * tile_w + column.
  static_assert(staging_bytes<T>() <= 2 * kStages * kTileBytes, "the C tile is staged in the operand ring");
  const int rectangle_plane = tiling.tile_h * tiling.tile_w;
  store_tile<T, kConsumerThreads>(
      params, split, m0, 16 * warp, 0, lane, acc, reinterpret_cast<float*>(ring_bytes), tid,
      [] { asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads)
                        : "memory"); },
      [&](int c) -> long long {
        const int image = c / rectangle_plane, within = c - image * rectangle_plane;
        const int row = within / tiling.tile_w;
        const int n = n0 + image, u = u0 + row, v = v0 + within - row * tiling.tile_w;
        if (n >= params.batch || u >= part.grid_h || v >= part.grid_w) return -1;
        return dest_offset(params, part, n, u, v);
      });
#endif
}

std::size_t tma_shared_bytes() { return kSwizzleAlign + 2 * kStages * kTileBytes + 16 * kStages; }

template <bool bf16>
void launch(const Context& ctx, const TmaGatherMaps& maps, const GatherParams& params, const TmaTiling& tiling,
            dim3 grid) {
  static const bool opted_in = (allow_shared_bytes(wgmma_tma_gather_kernel<bf16>, tma_shared_bytes(),
                                                   "cudaFuncSetAttribute(wgmma_tma_gather_kernel)"),
                                true);
  (void)opted_in;
  wgmma_tma_gather_kernel<bf16><<<grid, kTmaThreads, tma_shared_bytes(), cuda::stream(ctx)>>>(maps, params, tiling);
  cuda::check_launch("wgmma_tma_gather_kernel", __FILE__, __LINE__);
}

}  // namespace

bool run_wgmma_tma_gather(const Context& ctx, GatherParams& params, Tensor& partial_sums) {
  if (!ctx.kernel_settings().conv_wgmma_tma || params.channel_pad <= 0 || params.part_count < 1 ||
      params.part_count > kMaxPhases)
    return false;
  GridSize grids[kMaxPhases];
  for (int p = 0; p < params.part_count; ++p) grids[p] = {params.parts[p].grid_h, params.parts[p].grid_w};
  TmaTiling tiling;
  if (!tma_gather_tiling(params.batch, params.source_scale, grids, params.part_count, tiling)) return false;
  const bool bf16 = ctx.bf16_products();
  const int stage_k = wgmma_stage_k(bf16), scale = params.source_scale;
  int max_k_stride = 0;
  for (int p = 0; p < params.part_count; ++p) max_k_stride = std::max(max_k_stride, params.parts[p].k_stride);
  const long long rectangles = tiling.rectangles;

  const long long m_tiles = ceil_div(params.m_size, kTileRows);
  params.splits =
      static_cast<int>(k_splits(ctx, 2, rectangles * params.part_count * m_tiles, max_k_stride / stage_k, 8));
  params.dest_size = static_cast<long long>(params.batch) * params.m_size * params.dest_h * params.dest_w;
  params.partial = nullptr;
  if (params.splits > 1)
    params.partial = grown_scratch(ctx, partial_sums, {params.splits, params.dest_size}, DType::f32).data<float>();

  const std::uint64_t element = bf16 ? 2 : 4;
  TmaGatherMaps maps{};
  {
    const std::uint64_t sizes[4] = {
        static_cast<std::uint64_t>(params.channel_pad), static_cast<std::uint64_t>(params.source_w),
        static_cast<std::uint64_t>(params.source_h), static_cast<std::uint64_t>(params.batch)};
    const std::uint64_t strides[3] = {sizes[0] * element, sizes[0] * sizes[1] * element,
                                      sizes[0] * sizes[1] * sizes[2] * element};
    const std::uint32_t box[4] = {
        static_cast<std::uint32_t>(stage_k), static_cast<std::uint32_t>(tiling.tile_w * scale),
        static_cast<std::uint32_t>(tiling.tile_h * scale), static_cast<std::uint32_t>(tiling.tile_n)};
    const std::uint32_t element_strides[4] = {1, static_cast<std::uint32_t>(scale), static_cast<std::uint32_t>(scale),
                                              1};
    maps.source = tiled_tensor_map(const_cast<void*>(params.source), bf16, 4, sizes, strides, box, element_strides,
                                   "the convolution's NHWC source");
  }
  const std::uint64_t m_pad = static_cast<std::uint64_t>(m_tiles) * kTileRows;
  for (int p = 0; p < params.part_count; ++p) {
    const GatherPart& part = params.parts[p];
    const std::uint64_t sizes[2] = {static_cast<std::uint64_t>(std::max(part.k_stride, stage_k)), m_pad};
    const std::uint64_t strides[1] = {sizes[0] * element};
    const std::uint32_t box[2] = {static_cast<std::uint32_t>(stage_k), static_cast<std::uint32_t>(kTileRows)};
    const std::uint32_t element_strides[2] = {1, 1};
    void* base = const_cast<unsigned char*>(static_cast<const unsigned char*>(params.a)) + part.a_offset * element;
    maps.weight[p] =
        tiled_tensor_map(base, bf16, 2, sizes, strides, box, element_strides, "the convolution's packed weight");
  }
  const dim3 grid(static_cast<unsigned>(rectangles * params.part_count), static_cast<unsigned>(m_tiles),
                  static_cast<unsigned>(params.splits));
  if (bf16) launch<true>(ctx, maps, params, tiling, grid);
  else launch<false>(ctx, maps, params, tiling, grid);
  return true;
}
#else
bool run_wgmma_tma_gather(const Context&, GatherParams&, Tensor&) { return false; }
#endif

}  // namespace plexus::layers::implicit_gemm::detail
