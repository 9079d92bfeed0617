#pragma once
// The gather GEMM's parameters and the block-level pieces its two kernels
// share: gather_gemm_kernel (mma.sync, implicit_gemm_gather.cu) and
// wgmma_gather_kernel (Hopper wgmma, implicit_gemm_wgmma.cu). Both map a
// block to the same part, K range and tile of C, gather the same source
// pixels and write C the same way; only the shared-memory layout of their
// tiles and the products differ.
#include <cstddef>
#include <cstdint>

#include "activation_elements.cuh"
#include "convolution/implicit_gemm_common.cuh"
#include "fused_activation.cuh"

namespace plexus::layers::implicit_gemm::detail {

// One GEMM of a gather launch (forward: the only one; backward_data: one per
// phase). Its N index walks the points (u, v) of a grid_h x grid_w
// sub-grid of each destination image:
//   destination pixel (u*dest_scale + dest_row0, v*dest_scale + dest_col0),
//   source pixel of tap (ti, tj): (u*source_scale + source_row0 + tap_step*ti,
//                                 v*source_scale + source_col0 + tap_step*tj).
// Its K index is tap-major when the source has >= kTapMajorChannels channels:
// k = (ti*taps_w + tj)*channel_pad + c, c < channel_pad = the channels
// rounded up to a stage (BK), so a stage of K is BK channels of one tap. The
// source is then read from an NHWC copy with channel_pad channels (zeros
// beyond the real ones; nhwc_layout.h), where those BK channels of one pixel
// are contiguous: a stage loads aligned 16-byte chunks per pixel, with one
// bounds check per pixel and no per-channel check. With fewer channels
// (RGB images) padding them to BK would multiply the work, so K is flat:
// k = (c*taps_h + ti)*taps_w + tj, with a per-k table, gathered one element
// per copy from the NCHW source.
struct GatherPart {
  int k_size;    // flat: source channels * taps_h * taps_w; tap-major: taps * channel_pad
  int k_stride;  // row length of this part's packed A: k_size rounded up to kTapAlign
  int taps_h, taps_w;
  int tap_step;  // +1 (forward) or -1 (backward_data)
  int grid_h, grid_w;
  int source_row0, source_col0;
  int dest_row0, dest_col0;
  long long a_offset;  // this part's A [m_pad][k_stride] within GatherParams::a (elements)
};

struct GatherParams {
  const void* a;       // packed weight: f32, or bf16 bit patterns (wgmma BF16)
  const void* source;  // tap-major: NHWC [batch, source_h, source_w, channel_pad] (f32 or bf16); flat: NCHW f32
  const float* bias;   // [m_size] or null
  bool activate;       // then the fused activation (fused_activation.cuh)
  float negative_slope;
  void* dest;      // [batch, m_size, dest_h, dest_w]: f32, or BFloat16 when dest_bf16
  bool dest_bf16;  // dest is stored in bf16: each f32 sum (plus bias) is rounded to nearest even
  int m_size;
  int batch;
  int source_channels, source_h, source_w;
  int dest_h, dest_w;
  int source_scale, dest_scale;
  int channel_pad;  // tap-major: source channels rounded up to BK; 0 when K is flat
  int part_count;
  int splits;           // > 1: blockIdx.z picks a slice of K, written to partial
  float* partial;       // [splits][batch, m_size, dest_h, dest_w] when splits > 1 (no bias)
  long long dest_size;  // batch * m_size * dest_h * dest_w
  GatherPart parts[kMaxPhases];
};

// The tile of C and the slice of K a block of a gather launch owns: grid =
// (N tiles of the largest part x parts, M tiles, K splits), the part
// varying fastest. backward_data's parts (phases) write interleaved pixels
// of the same 32-byte sectors of dest: with the phases of one N tile run
// side by side, a sector's pieces meet in L2 before it is written back.
// With the parts one after another (part in blockIdx.z) each sector left L2
// half written, and DRAM (ECC) read and rewrote it: the pass moved several
// times its output's bytes through DRAM.
struct GatherBlock {
  const GatherPart* part;
  int split;
  int grid_plane;        // the part's grid_h * grid_w
  long long n_size;      // the part's N: batch * grid_plane
  long long n0;          // the tile's first column
  int m0;                // the tile's first row
  int k_first, k_tiles;  // this split's stages [k_first, k_first + k_tiles); may be empty (writes zeros)
};

template <int BM, int BN, int BK>
__device__ inline GatherBlock gather_block(const GatherParams& params) {
  GatherBlock block;
  block.part = &params.parts[blockIdx.x % params.part_count];
  block.split = blockIdx.z;
  block.grid_plane = block.part->grid_h * block.part->grid_w;
  block.n_size = static_cast<long long>(params.batch) * block.grid_plane;
  block.n0 = static_cast<long long>(blockIdx.x / params.part_count) * BN;
  block.m0 = blockIdx.y * BM;
  const int all_k_tiles = block.part->k_stride / BK;
  const int tiles_per_split = (all_k_tiles + params.splits - 1) / params.splits;
  block.k_first = min(all_k_tiles, block.split * tiles_per_split);
  block.k_tiles = min(all_k_tiles, block.k_first + tiles_per_split) - block.k_first;
  return block;
}

// Tap-major tap table: entry t holds the source pixel offset of tap t =
// ti*taps_w + tj relative to the pixel's base and its (row, column)
// displacement (16 bits each) for the bounds check, so the gather needs no division.
__device__ inline void write_tap_major_table(const GatherParams& params, const GatherPart& part, int2* taps) {
  for (int tap = threadIdx.x; tap < part.taps_h * part.taps_w; tap += blockDim.x) {
    const int di = (tap / part.taps_w) * part.tap_step, dj = (tap % part.taps_w) * part.tap_step;
    taps[tap] = make_int2(di * params.source_w + dj,
                          static_cast<int>((static_cast<unsigned>(di) << 16) | (static_cast<unsigned>(dj) & 0xffffu)));
  }
}

// The source pixel of column n of a part (tap (0, 0)): its row and column in
// the source image and its image's index. row0 is far outside every image
// when n is past the part's columns, so every bounds check fails.
struct GatherPixel {
  bool valid = false;
  int image = 0;
  int row0 = -(1 << 24);
  int col0 = 0;
};

__device__ inline GatherPixel gather_pixel(const GatherParams& params, const GatherBlock& block, long long n) {
  GatherPixel pixel;
  if (n < block.n_size) {
    const GatherPart& part = *block.part;
    pixel.valid = true;
    pixel.image = static_cast<int>(n / block.grid_plane);
    const int q = static_cast<int>(n - static_cast<long long>(pixel.image) * block.grid_plane);
    const int u = q / part.grid_w, v = q - u * part.grid_w;
    pixel.row0 = u * params.source_scale + part.source_row0;
    pixel.col0 = v * params.source_scale + part.source_col0;
  }
  return pixel;
}

// Epilogue: the block's tile of C -> dest, plus bias, then the fused
// activation (rounded to bf16 when dest is stored in bf16: the f32 value an
// f32 dest would hold, rounded); or, when K is split, this split's f32
// partial sums (bias, activation, sum and rounding come in reduce_splits). Each warp
// holds MT x NT m16n8 accumulator tiles (rows warp_m0 + 16 mt + g [+8],
// columns warp_n0 + 8 nt + 2t [+1], g = lane/4, t = lane%4: the C layout of
// mma.sync m16n8 and, per n8 block, of wgmma m64nN). Written from there, a
// warp's store would touch 8 rows x 4 columns: 8-16 sectors of 32 bytes for
// 128 bytes, which made L2 the bound of the backward_data phases
// (8 bytes used per sector sent). So the tile goes through shared memory
// first (`staging`: the block's free operand ring, every thread past its last
// read of it) and each warp then writes whole rows: 32 consecutive columns
// per store, 4 full sectors (forward), or 8 half sectors (a phase, whose
// other half another phase's block fills in L2).
template <class T>
__host__ __device__ constexpr int staging_pitch() {
  return T::BN + 8;  // floats per staged row: a half-warp's float2 stores (4 rows x 4 pairs) hit 32 distinct banks
}
template <class T>
__host__ __device__ constexpr std::size_t staging_bytes() {
  return sizeof(float) * T::BM * staging_pitch<T>();
}

// The tile store itself: kStoreThreads threads (`thread` counts them from
// 0) that meet at sync(), a barrier of exactly them, write rows m0.. of
// split `split` with column_of(c), the offset in dest of the tile's column
// c (image and pixel), or -1 for a column past the part's pixels.
template <class T, int kStoreThreads, class Sync, class ColumnOf>
__device__ inline void store_tile(const GatherParams& params, int split, int m0, int warp_m0, int warp_n0, int lane,
                                  const float (&acc)[T::MT][T::NT][4], float* staging, int thread, Sync&& sync,
                                  ColumnOf&& column_of) {
  constexpr int kPitch = staging_pitch<T>(), kWarps = kStoreThreads / 32, kColumnsPerLane = T::BN / 32;
  static_assert(T::BN % 32 == 0, "a warp stores a row in whole passes of 32 columns");
  const int g = lane >> 2, t = lane & 3;
  sync();  // every thread is past its last read of the operand ring
#pragma unroll
  for (int mt = 0; mt < T::MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::NT; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        *reinterpret_cast<float2*>(staging + (warp_m0 + mt * 16 + g + 8 * half) * kPitch + warp_n0 + nt * 8 + 2 * t) =
            make_float2(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
  sync();

  const int dest_plane = params.dest_h * params.dest_w;
  const bool whole = params.splits == 1;
  const bool bf16 = whole && params.dest_bf16;
  float* dest = whole ? static_cast<float*>(params.dest) : params.partial + split * params.dest_size;
  BFloat16* dest_bf16 = static_cast<BFloat16*>(params.dest);
  long long column[kColumnsPerLane];
#pragma unroll
  for (int j = 0; j < kColumnsPerLane; ++j) column[j] = column_of(lane + 32 * j);
  for (int row = thread / 32; row < T::BM; row += kWarps) {
    const int m = m0 + row;
    if (m >= params.m_size) break;
    const float bias = whole && params.bias ? params.bias[m] : 0.0f;
    const long long row_offset = static_cast<long long>(m) * dest_plane;
#pragma unroll
    for (int j = 0; j < kColumnsPerLane; ++j) {
      if (column[j] < 0) continue;
      const float value =
          activated(staging[row * kPitch + lane + 32 * j] + bias, whole && params.activate, params.negative_slope);
      if (bf16) store_f32(dest_bf16 + row_offset + column[j], value);
      else dest[row_offset + column[j]] = value;
    }
  }
}

// The offset in dest of destination point (u, v) of a part's grid in image `image`.
__device__ inline long long dest_offset(const GatherParams& params, const GatherPart& part, int image, int u, int v) {
  return static_cast<long long>(image) * params.m_size * params.dest_h * params.dest_w +
         static_cast<long long>(u * params.dest_scale + part.dest_row0) * params.dest_w + v * params.dest_scale +
         part.dest_col0;
}

// The whole block (kThreads) stores its tile of a gather launch, column n0 + c of the part.
template <class T>
__device__ inline void store_gather_tile(const GatherParams& params, const GatherBlock& block, int warp_m0, int warp_n0,
                                         int lane, const float (&acc)[T::MT][T::NT][4], float* staging) {
  const GatherPart& part = *block.part;
  store_tile<T, kThreads>(
      params, block.split, block.m0, warp_m0, warp_n0, lane, acc, staging, static_cast<int>(threadIdx.x),
      [] { __syncthreads(); },
      [&](int c) -> long long {
        const long long n = block.n0 + c;
        if (n >= block.n_size) return -1;
        const int image = static_cast<int>(n / block.grid_plane);
        const int q = static_cast<int>(n - static_cast<long long>(image) * block.grid_plane);
        const int u = q / part.grid_w;
        return dest_offset(params, part, image, u, q - u * part.grid_w);
      });
}

// The wgmma gather's tile of C: 128 x 128, two warpgroups of 64 rows (as 8
// warps of 16 rows x 128 columns: the accumulator layout of wgmma m64n128,
// MT = 1, NT = 16), BK elements of K per stage (one 128-byte row), a
// STAGES-deep ring of 32 KiB stages (implicit_gemm_wgmma.cu picks the depth).
template <int BK, int STAGES = 3>
using WgmmaGatherTile = Tile<128, 128, 8, 1, BK, STAGES>;

// Host side of the wgmma variant (implicit_gemm_wgmma.cu).

// Elements of K per pipeline stage of the wgmma gather: one 128-byte
// swizzle row, 32 f32 (TF32) or 64 bf16. Tap-major channel_pad is a multiple of it.
inline int wgmma_stage_k(bool bf16) { return bf16 ? 64 : 32; }

// Launches wgmma_gather_kernel on `grid` (TF32 from f32 operands, or BF16
// from bf16 bit patterns) with a tap table of table_entries; checked.
void launch_wgmma_gather(const Context& ctx, const GatherParams& params, dim3 grid, int table_entries, bool bf16);

// Runs the gather GEMM on Hopper with TMA-fed operands
// (implicit_gemm_wgmma_tma.cu) when it takes the problem (tap-major K and
// tma_gather_tiling, implicit_gemm_tma_tiling.h), unless
// PLEXUS_CONV_WGMMA_TMA is "0".
// Sets params.splits, dest_size and partial (the split-K sums, in
// partial_sums) as run_gather does; returns whether it ran.
bool run_wgmma_tma_gather(const Context& ctx, GatherParams& params, Tensor& partial_sums);

}  // namespace plexus::layers::implicit_gemm::detail
