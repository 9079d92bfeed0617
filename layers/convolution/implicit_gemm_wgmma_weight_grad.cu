// The implicit-GEMM engine's backward_weight on Hopper (sm_90a): wgmma
// products, both operands brought into shared memory by the tensor memory
// accelerator (TMA). In Conv2d terms (implicit_gemm.h)
//   dW[o, c, i, j] += sum_{n, a, b} Y[n, o, a, b] X[n, c, a*s - p + i, b*s - p + j]
// is, per kernel tap (i, j), a GEMM C[o][c] = sum_k A[o][k] B[c][k] over
// output pixels. TF32 wgmma wants A and B K-contiguous (pixels innermost) in
// shared memory, and a TMA box must start 16-byte aligned in its innermost
// dimension. Along an output row a tap meets input pixels s apart, so X is
// split by stride phase, where they are contiguous (weight_grad_layout.h):
//   X[n, c, s*(a + di) + pa, s*u + pb] = phases[pa*s + pb][n][c][a + di][u]
//   with pa = (i - p) mod s, di = floor((i - p) / s), likewise pb, dj, and u = b + dj.
// The sum runs over u in aligned tiles of BK; the matching Y pixel b = u - dj
// comes from a copy of Y with its rows shifted right by dj (one per distinct
// dj; shifted_rows), so both boxes start aligned:
//   A box (u0, a, o0, n, dj - dj_min) of the shifted Y copies,
//   B box (u0, a + di, c0, n, phase) of the phases,
// zeros outside (the TMA's out-of-bounds fill is the padding). Both land
// 128-byte swizzled, the layout wgmma reads.
//
// BF16 takes another way by default (PLEXUS_CONV_WGMMA_WGRAD_NHWC=0 keeps
// the copies): B is MN-major, which wgmma allows for 16-bit operands, so the
// tap's shift moves from the pixels to outer dimensions of X's NHWC copy:
//   A box (u0, a, o0, n) of Y itself,
//   B box (c0, s*u0 - p + j, s*a - p + i, n) of NHWC X, every s-th column and row,
// 64 channels x BK pixels, a 128-byte row of channels per pixel; one NHWC
// copy of X replaces the phases and the shifted copies of Y.
//
// BF16: the copies are rounded to bf16 (nearest even), BK = 64. Where an
// output row is not a whole number of 64-pixel tiles, a K tile is 32 pixels
// of two consecutive rows (a, a + 1; Wo % 64 = 32, as in a 5x5/2 layer onto
// 64x64) or 16 pixels of four (Wo % 32 = 16, as onto 32x32) instead: each
// operand's slot holds one sub-tile per row, of 64-byte rows with 64-byte
// swizzle or 32-byte rows with 32-byte swizzle (a TMA box pads its rows to
// the swizzle span, so one box of several rows with 128-byte swizzle would
// not fit the slot); a row past the bottom is zeros. The path takes
// problems with >= 64 channels on both sides, output rows of whole 32-pixel
// (TF32) or 16-pixel (BF16) tiles, stride <= 4 and at most 4 distinct dj
// (wgmma_weight_grad_fits); others keep the mma.sync kernels of
// implicit_gemm_weight_grad.cu.
//
// This file is compiled for sm_90a alone when the build includes Hopper
// (layers/CMakeLists.txt); otherwise the kernel body is empty and
// uses_wgmma() keeps the host from calling it.
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "activation_storage.h"
#include "convolution/implicit_gemm_bf16.cuh"
#include "convolution/implicit_gemm_common.cuh"
#include "convolution/implicit_gemm_wgmma_weight_grad.h"
#include "convolution/tensor_maps.h"
#include "convolution/wgmma.cuh"
#include "convolution/weight_grad_layout.h"
#include "plexus/error.h"

namespace plexus::layers::implicit_gemm::detail {

namespace {

constexpr int kRowBytes = kWgmmaRowBytes;  // one K tile row: 32 f32 or 64 bf16 pixels
constexpr int kTileRows = kWgmmaTileRows;  // o rows of A, c rows of B
constexpr int kTileBytes = kWgmmaTileBytes;
constexpr int kStages = 3;  // 3 x 32 KiB: two blocks per multiprocessor
constexpr int kSwizzleAlign = kWgmmaSwizzleAlign;

struct WgmmaWeightGradParams {
  float* partial;  // [splits][k*k][Co][Ci]: a block's tile is 128 rows of 128 contiguous floats
  int in_channels, out_channels, kernel, stride, padding;
  int out_height;
  int shift_min;      // the smallest dj (the first shifted copy of Y)
  int row_pixels;     // pixels of one row in a K tile: BK, BK / 2 or BK / 4
  int rows_per_tile;  // 1, 2 or 4: rows a, a + 1, ..., one sub-tile each (64- or 32-byte swizzled)
  int row_tiles;      // K tiles across an output row: u in [0, row_tiles * row_pixels)
  int row_groups;     // ceil(Ho / rows_per_tile)
  int channel_tiles;  // ceil(Ci / 128)
  int k_tiles;        // batch * row_groups * row_tiles
  int tiles_per_split;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// acc += one ring slot's products: kRows output rows, each in its own
// sub-tile of 128 channel rows of kRowBytes / kRows bytes (swizzled over as
// many), multiplied in 32-byte k steps (k8 TF32 / k16 BF16) along them;
// warpgroup w takes rows 64w..64w+63 of A.
template <int kRows, bool bf16>
__device__ inline void multiply_tile(float (&acc)[16][4], unsigned a_tile, unsigned b_tile, int warpgroup) {
  constexpr int kSubTileBytes = kTileBytes / kRows, kSubRowBytes = kRowBytes / kRows;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::uint64_t a =
        swizzled_descriptor<kSubRowBytes>(a_tile + r * kSubTileBytes + warpgroup * (kSubTileBytes / 2));
    const std::uint64_t b = swizzled_descriptor<kSubRowBytes>(b_tile + r * kSubTileBytes);
#pragma unroll
    for (int step = 0; step < kSubRowBytes / 32; ++step) {
      if constexpr (bf16) wgmma_bf16(acc, a + 2 * step, b + 2 * step);
      else wgmma_tf32(acc, a + 2 * step, b + 2 * step);
    }
  }
}

// The same with B MN-major (the NHWC path, BF16): the slot's B is two boxes
// of 64 channels x 64 pixels, each pixel a 128-byte row of its 64 channels,
// the second box kTileBytes / 2 after the first; pixel r * kRowPixels + q
// is pixel q of row r, as A's sub-tile r.
template <int kRows>
__device__ inline void multiply_tile_nhwc(float (&acc)[16][4], unsigned a_tile, unsigned b_tile, int warpgroup) {
  constexpr int kSubTileBytes = kTileBytes / kRows, kSubRowBytes = kRowBytes / kRows, kRowPixels = kSubRowBytes / 2;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::uint64_t a =
        swizzled_descriptor<kSubRowBytes>(a_tile + r * kSubTileBytes + warpgroup * (kSubTileBytes / 2));
#pragma unroll
    for (int step = 0; step < kSubRowBytes / 32; ++step) {
      const std::uint64_t b =
          mn_major_descriptor(b_tile + (r * kRowPixels + 16 * step) * kRowBytes, kTileBytes / 2, 8 * kRowBytes);
      wgmma_bf16<1>(acc, a + 2 * step, b);
    }
  }
}

#endif

// grid = (taps x channel tiles, output-channel tiles, K splits). 288
// threads: two consumer warpgroups, warpgroup w multiplying rows 64w..64w+63
// of A (output channels) by the 128 rows of B (input channels), and one
// producer warp whose first lane issues the TMA loads. Per ring slot, `full`
// completes when both boxes have landed, `empty` when all 8 consumer warps
// are done with the products that read it (each keeps one group of wgmmas in
// flight, so tile k-1's slot is released after tile k's products are issued).
constexpr int kConsumerThreads = 256;
constexpr int kWeightGradThreads = kConsumerThreads + 32;

template <bool bf16, bool kNhwcX = false>
__global__ void __launch_bounds__(kWeightGradThreads, 2)
    wgmma_weight_grad_kernel(const __grid_constant__ CUtensorMap y_map, const __grid_constant__ CUtensorMap x_map,
                             const WgmmaWeightGradParams params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const int tap = blockIdx.x / params.channel_tiles;
  const int c0 = (blockIdx.x - tap * params.channel_tiles) * kTileRows;
  const int o0 = blockIdx.y * kTileRows;
  const int k_first = blockIdx.z * params.tiles_per_split;
  const int k_tiles = max(0, min(params.k_tiles, k_first + params.tiles_per_split) - k_first);
  // The tap's phase and offset in the phase images (floor division of i - p by s).
  const int s = params.stride;
  const int ti = tap / params.kernel - params.padding, tj = tap % params.kernel - params.padding;
  const int di = (ti >= 0 ? ti : ti - s + 1) / s, dj = (tj >= 0 ? tj : tj - s + 1) / s;
  const int phase = (ti - s * di) * s + (tj - s * dj);

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const unsigned shared_base = shared_address(shared_bytes);
  const unsigned ring = (shared_base + kSwizzleAlign - 1) & ~static_cast<unsigned>(kSwizzleAlign - 1);
  // kStages `full` mbarriers of 8 bytes after the slots, then kStages `empty`.
  const TmaRing<kStages> slots{ring + 2 * kStages * kTileBytes, ring + 2 * kStages * kTileBytes + 8 * kStages};
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  slots.init(kConsumerThreads / 32);
  __syncthreads();

  if (warp == kConsumerThreads / 32) {
    // Producer. Tile k = (image n, output row a, row tile r): A box
    // (r * row_pixels, a, o0, n, dj - dj_min) of the shifted copies of Y; B
    // box (r * row_pixels, a + di, c0, n, phase) of the phases; with two or
    // four rows per tile, the same for rows a + 1, ... into the slot's next
    // sub-tiles.
    if (lane == 0)
      for (int k = 0; k < k_tiles; ++k) {
        const int stage = slots.acquire(k, 2 * kTileBytes), tile = k_first + k;
        const int row_tile = tile % params.row_tiles, rest = tile / params.row_tiles;
        const int a = params.rows_per_tile * (rest % params.row_groups), n = rest / params.row_groups;
        const unsigned a_tile = ring + stage * kTileBytes, b_tile = ring + (kStages + stage) * kTileBytes;
        const unsigned full = slots.full + 8 * stage;
        const int u0 = row_tile * params.row_pixels;
        const unsigned sub_tile_bytes = kTileBytes / params.rows_per_tile;
        if constexpr (kNhwcX) {
          // A box (u0, a + r, o0, n) of Y itself; B boxes (c0 or c0 + 64,
          // s u0 - p + j, s a - p + i, n) of X's NHWC copy, every s-th column and row.
          const int x_column = s * u0 + tj, x_row = s * a + ti;
          for (int r = 0; r < params.rows_per_tile; ++r)
            tma_load_5d(a_tile + r * sub_tile_bytes, &y_map, u0, a + r, o0, n, 0, full);
          tma_load_4d(b_tile, &x_map, c0, x_column, x_row, n, full);
          tma_load_4d(b_tile + kTileBytes / 2, &x_map, c0 + 64, x_column, x_row, n, full);
        } else {
          for (int r = 0; r < params.rows_per_tile; ++r) {
            tma_load_5d(a_tile + r * sub_tile_bytes, &y_map, u0, a + r, o0, n, dj - params.shift_min, full);
            tma_load_5d(b_tile + r * sub_tile_bytes, &x_map, u0, a + r + di, c0, n, phase, full);
          }
        }
      }
    return;
  }

  const int warpgroup = warp / 4;
  float acc[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  slots.consume(k_tiles, acc, [&](int stage) {
    const unsigned a_tile = ring + stage * kTileBytes, b_tile = ring + (kStages + stage) * kTileBytes;
    if constexpr (kNhwcX) {
      if (params.rows_per_tile == 1) multiply_tile_nhwc<1>(acc, a_tile, b_tile, warpgroup);
      else if (params.rows_per_tile == 2) multiply_tile_nhwc<2>(acc, a_tile, b_tile, warpgroup);
      else multiply_tile_nhwc<4>(acc, a_tile, b_tile, warpgroup);
    } else if (params.rows_per_tile == 1) {
      multiply_tile<1, bf16>(acc, a_tile, b_tile, warpgroup);
    } else if constexpr (bf16) {
      if (params.rows_per_tile == 2) multiply_tile<2, bf16>(acc, a_tile, b_tile, warpgroup);
      else multiply_tile<4, bf16>(acc, a_tile, b_tile, warpgroup);
    }
  });

  // Accumulator (j, e) of warp w: o = 16 (w % 4) + g (+8 for e >= 2), c = 8j + 2t + e % 2
  // (wgmma's m64nNk layout, per n8 block that of mma.sync m16n8). Stored
  // tap-major, a warp's store covers 8 rows x 32 contiguous bytes (whole
  // sectors); in dW's own [o][c][tap] order it was one float per sector,
  // which cost more than the products where the pixel sum is short.
  const int g = lane >> 2, t = lane & 3;
  const long long tap_size = static_cast<long long>(params.out_channels) * params.in_channels;
  float* partial =
      params.partial + (static_cast<long long>(blockIdx.z) * params.kernel * params.kernel + tap) * tap_size;
  const bool float2_stores = params.in_channels % 2 == 0;  // (o, c) and (o, c + 1), c even, are 8-byte aligned
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int o = o0 + 64 * warpgroup + 16 * (warp % 4) + g + 8 * half;
    if (o >= params.out_channels) continue;
    float* row = partial + static_cast<long long>(o) * params.in_channels;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int c = c0 + 8 * j + 2 * t;
      const float first = acc[j][2 * half], second = acc[j][2 * half + 1];
      if (float2_stores && c + 1 < params.in_channels) {
        *reinterpret_cast<float2*>(row + c) = make_float2(first, second);
      } else {
        if (c < params.in_channels) row[c] = first;
        if (c + 1 < params.in_channels) row[c + 1] = second;
      }
    }
  }
#endif
}

// dW[o][c][tap] += sum over splits of partial[split][tap][o][c]. Block b
// takes kSumPairs consecutive (o, c) pairs and all taps: it reads each
// split's rows of them whole (one row of kSumPairs floats per tap), turns
// them over in shared memory and adds the block's kSumPairs x taps
// contiguous floats of dW. Writing dW straight from the partial sums' order
// touched one sector per float, which cost more than the sums.
constexpr int kSumPairs = 64, kSumThreads = 256, kSumMaxTaps = 81;  // kernels up to 9x9 (wgmma_weight_grad_fits)

__global__ void __launch_bounds__(kSumThreads)
    sum_tap_partials_kernel(const float* partial, int splits, int taps, long long tap_size, float* weight_grad) {
  __shared__ float sums[kSumPairs * kSumMaxTaps];  // [pair][tap]
  const long long first = static_cast<long long>(blockIdx.x) * kSumPairs;
  const int pairs = static_cast<int>(min(static_cast<long long>(kSumPairs), tap_size - first));
  const long long split_size = taps * tap_size;
  for (int index = threadIdx.x; index < taps * kSumPairs; index += kSumThreads) {
    const int tap = index / kSumPairs, pair = index % kSumPairs;
    if (pair >= pairs) continue;
    const float* source = partial + tap * tap_size + first + pair;
    float sum = 0.0f;
    for (int split = 0; split < splits; ++split) sum += source[split * split_size];
    sums[pair * taps + tap] = sum;  // an odd number of taps (odd k) puts a warp's 32 pairs in distinct banks
  }
  __syncthreads();
  float* destination = weight_grad + first * taps;
  for (int index = threadIdx.x; index < pairs * taps; index += kSumThreads) destination[index] += sums[index];
}

// ---------------------------------------------------------------------------
// Host side.

std::size_t kernel_shared_bytes() { return kSwizzleAlign + 2 * kStages * kTileBytes + 16 * kStages; }

// A tiled tensor map over a packed 5-dimensional array (sizes in elements,
// innermost first), boxes of `box` elements with rows of box[0] elements
// (128, 64 or 32 bytes) swizzled over as many bytes, zeros outside.
CUtensorMap tensor_map(void* base, bool bf16, const std::uint64_t (&sizes)[5], const std::uint32_t (&box)[5],
                       const char* what) {
  const std::uint64_t element = bf16 ? 2 : 4;
  std::uint64_t strides[4];  // bytes from one index of dimension d + 1 to the next
  strides[0] = sizes[0] * element;
  for (int d = 1; d < 4; ++d) strides[d] = strides[d - 1] * sizes[d];
  const std::uint32_t element_strides[5] = {1, 1, 1, 1, 1};
  return tiled_tensor_map(base, bf16, 5, sizes, strides, box, element_strides,
                          (std::string("the weight gradient's ") + what).c_str());
}

int stage_pixels(bool bf16) { return bf16 ? 64 : 32; }

// Pixels of one output row in a K tile: a whole stage, or at BF16 half or a
// quarter of one when rows are 32 or 16 pixels longer than a multiple of 64
// (two or four rows per tile).
int row_pixels(const ConvProblem& p, bool bf16) {
  const int stage = stage_pixels(bf16);
  if (!bf16 || p.out_width % stage == 0) return stage;
  return p.out_width % (stage / 2) == 0 ? stage / 2 : stage / 4;
}

// floor(a / b) for b > 0.
long long floor_div(long long a, long long b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// The column offsets dj = floor((j - p) / s) of the kernel's taps j: one
// row-shifted copy of Y per value, first to last.
struct TapShifts {
  int first, last;
  int count() const { return last - first + 1; }
};
TapShifts tap_shifts(const ConvProblem& p) {
  return {static_cast<int>(floor_div(-p.padding, p.stride)),
          static_cast<int>(floor_div(p.kernel - 1 - p.padding, p.stride))};
}

}  // namespace

bool wgmma_weight_grad_fits(const ConvProblem& p, bool bf16) {
  if (p.stride < 1 || p.stride > 4 || p.kernel > 9 || p.in_channels < 64 || p.out_channels < 64 ||
      p.out_width % row_pixels(p, bf16) != 0)
    return false;
  return tap_shifts(p).count() <= 4 && p.batch * p.out_height * (p.out_width / row_pixels(p, bf16) + 1) < (1LL << 31);
}

namespace {

// The operands' tensor maps and the K tiles across an output row.
struct WeightGradOperands {
  CUtensorMap y_map, x_map;
  long long row_tiles;
  int shift_min;
};

// The copies' path: X by stride phase, Y shifted per tap column offset dj,
// both K-major boxes.
WeightGradOperands phase_operands(const Context& ctx, const ConvProblem& p, const Tensor& x, const Tensor& y,
                                  Scratch& scratch) {
  const bool bf16 = ctx.bf16_products();
  const int s = static_cast<int>(p.stride), tile_pixels = row_pixels(p, bf16);
  const long long element = bf16 ? 2 : 4;
  // Column offsets dj of the taps, and the columns u of the phase images the
  // sum needs: those with a Y pixel (u - dj < Wo) inside the phase width.
  const TapShifts shift = tap_shifts(p);
  const int shift_min = shift.first, shift_max = shift.last, shifts = shift.count();
  const long long phase_height = ceil_div(p.height, s), phase_width = ceil_div(p.width, s);
  const long long row_tiles =
      ceil_div(std::max(1LL, std::min<long long>(phase_width, p.out_width + shift_max)), tile_pixels);
  const long long columns = row_tiles * tile_pixels;
  // The phase images of X, rows padded to 16 bytes (a TMA stride rule).
  const long long row_pitch = round_up(phase_width, 16 / element);
  const long long phase_elements = static_cast<long long>(s) * s * p.batch * p.in_channels * phase_height * row_pitch;
  const long long shifted_elements = shifts * p.batch * p.out_channels * p.out_height * columns;
  void* phases = nullptr;
  void* shifted = nullptr;
  if (bf16) {
    std::uint16_t* x_copy = bf16_scratch(ctx, scratch.weight_phases, phase_elements);
    std::uint16_t* y_copy = bf16_scratch(ctx, scratch.weight_shifted, shifted_elements);
    dispatch_activation(x, [&](const auto* elements) {
      nchw_to_phases_bf16_cuda(ctx, elements, p.batch, p.in_channels, p.height, p.width, s, row_pitch, x_copy);
    });
    dispatch_activation(y, [&](const auto* elements) {
      shifted_rows_bf16_cuda(ctx, elements, p.batch, p.out_channels, p.out_height, p.out_width, shift_min, shifts,
                             columns, y_copy);
    });
    phases = x_copy;
    shifted = y_copy;
  } else {
    float* x_copy = grown_scratch(ctx, scratch.weight_phases, {phase_elements}, DType::f32).data<float>();
    float* y_copy = grown_scratch(ctx, scratch.weight_shifted, {shifted_elements}, DType::f32).data<float>();
    dispatch_activation(x, [&](const auto* elements) {
      nchw_to_phases_cuda(ctx, elements, p.batch, p.in_channels, p.height, p.width, s, row_pitch, x_copy);
    });
    dispatch_activation(y, [&](const auto* elements) {
      shifted_rows_cuda(ctx, elements, p.batch, p.out_channels, p.out_height, p.out_width, shift_min, shifts, columns,
                        y_copy);
    });
    phases = x_copy;
    shifted = y_copy;
  }

  const std::uint64_t y_sizes[5] = {static_cast<std::uint64_t>(columns), static_cast<std::uint64_t>(p.out_height),
                                    static_cast<std::uint64_t>(p.out_channels), static_cast<std::uint64_t>(p.batch),
                                    static_cast<std::uint64_t>(shifts)};
  // A box: tile_pixels of one row (128 bytes; 64 or 32 with two or four rows per K tile) of 128 channels.
  const std::uint32_t box[5] = {static_cast<std::uint32_t>(tile_pixels), 1, kTileRows, 1, 1};
  const std::uint64_t x_sizes[5] = {static_cast<std::uint64_t>(row_pitch), static_cast<std::uint64_t>(phase_height),
                                    static_cast<std::uint64_t>(p.in_channels), static_cast<std::uint64_t>(p.batch),
                                    static_cast<std::uint64_t>(s) * s};
  return {tensor_map(shifted, bf16, y_sizes, box, "shifted output gradient"),
          tensor_map(phases, bf16, x_sizes, box, "input phases"), row_tiles, shift_min};
}

// The NHWC path (BF16 products): A boxes of Y itself (or of a bf16 copy
// where Y is f32 or not 16-byte aligned), B boxes of an NHWC bf16 copy of X
// taking every s-th column and row from any corner, so no copy depends on
// the tap: the layer's kept copy where it holds X, else one made here with
// rows padded to 8 channels (a TMA stride rule).
WeightGradOperands nhwc_operands(const Context& ctx, const ConvProblem& p, const Tensor& x, const Tensor& y,
                                 Scratch& scratch, const KeptSource* kept) {
  const int s = static_cast<int>(p.stride), tile_pixels = row_pixels(p, true);
  const int rows_per_tile = stage_pixels(true) / tile_pixels;
  const int channel_stride = kept ? kept->channel_pad : static_cast<int>(round_up(p.in_channels, 8));
  const void* x_nhwc = kept ? static_cast<const void*>(kept->buffer.data<float>())
                            : dispatch_activation(x, [&](const auto* elements) -> const void* {
                                return nhwc_source_bf16(ctx, elements, p.batch, p.in_channels, p.height, p.width,
                                                        channel_stride, scratch.weight_phases);
                              });
  const void* y_bf16 = nullptr;
  if (y.dtype() == DType::bf16 && reinterpret_cast<std::uintptr_t>(y.data<BFloat16>()) % 16 == 0) {
    y_bf16 = y.data<BFloat16>();
  } else {
    std::uint16_t* y_copy =
        bf16_scratch(ctx, scratch.weight_shifted, p.batch * p.out_channels * p.out_height * p.out_width);
    dispatch_activation(y, [&](const auto* elements) {
      nchw_to_phases_bf16_cuda(ctx, elements, p.batch, p.out_channels, p.out_height, p.out_width, 1, p.out_width,
                               y_copy);
    });
    y_bf16 = y_copy;
  }
  const std::uint64_t y_sizes[5] = {static_cast<std::uint64_t>(p.out_width), static_cast<std::uint64_t>(p.out_height),
                                    static_cast<std::uint64_t>(p.out_channels), static_cast<std::uint64_t>(p.batch), 1};
  const std::uint32_t y_box[5] = {static_cast<std::uint32_t>(tile_pixels), 1, kTileRows, 1, 1};
  const std::uint64_t x_sizes[4] = {static_cast<std::uint64_t>(channel_stride), static_cast<std::uint64_t>(p.width),
                                    static_cast<std::uint64_t>(p.height), static_cast<std::uint64_t>(p.batch)};
  const std::uint64_t x_strides[3] = {x_sizes[0] * 2, x_sizes[0] * x_sizes[1] * 2,
                                      x_sizes[0] * x_sizes[1] * x_sizes[2] * 2};
  // 64 channels (128 bytes) of rows_per_tile rows of tile_pixels pixels, every s-th of each.
  const std::uint32_t x_box[4] = {64, static_cast<std::uint32_t>(tile_pixels * s),
                                  static_cast<std::uint32_t>(rows_per_tile * s), 1};
  const std::uint32_t x_element_strides[4] = {1, static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(s), 1};
  return {tensor_map(const_cast<void*>(y_bf16), true, y_sizes, y_box, "output gradient"),
          tiled_tensor_map(const_cast<void*>(x_nhwc), true, 4, x_sizes, x_strides, x_box, x_element_strides,
                           "the weight gradient's NHWC input"),
          p.out_width / tile_pixels, 0};
}

template <bool bf16, bool nhwc>
void launch_weight_grad(const Context& ctx, dim3 grid, const WeightGradOperands& operands,
                        const WgmmaWeightGradParams& params) {
  const std::size_t bytes = kernel_shared_bytes();
  static const bool opted_in = (allow_shared_bytes(wgmma_weight_grad_kernel<bf16, nhwc>, bytes,
                                                   "cudaFuncSetAttribute(wgmma_weight_grad_kernel)"),
                                true);
  (void)opted_in;
  wgmma_weight_grad_kernel<bf16, nhwc>
      <<<grid, kWeightGradThreads, bytes, cuda::stream(ctx)>>>(operands.y_map, operands.x_map, params);
  cuda::check_launch("wgmma_weight_grad_kernel", __FILE__, __LINE__);
}

}  // namespace

void wgmma_weight_grad(const Context& ctx, const ConvProblem& p, const Tensor& x, const Tensor& y, float* weight_grad,
                       Scratch& scratch, const KeptSource* kept) {
  const bool bf16 = ctx.bf16_products();
  const bool nhwc = bf16 && ctx.kernel_settings().conv_wgmma_weight_grad_nhwc;
  const int tile_pixels = row_pixels(p, bf16);
  const int rows_per_tile = stage_pixels(bf16) / tile_pixels;
  const WeightGradOperands operands =
      nhwc ? nhwc_operands(ctx, p, x, y, scratch, kept) : phase_operands(ctx, p, x, y, scratch);

  WgmmaWeightGradParams params{};
  params.in_channels = static_cast<int>(p.in_channels);
  params.out_channels = static_cast<int>(p.out_channels);
  params.kernel = static_cast<int>(p.kernel);
  params.stride = static_cast<int>(p.stride);
  params.padding = static_cast<int>(p.padding);
  params.out_height = static_cast<int>(p.out_height);
  params.shift_min = operands.shift_min;
  params.row_pixels = tile_pixels;
  params.rows_per_tile = rows_per_tile;
  params.row_tiles = static_cast<int>(operands.row_tiles);
  params.row_groups = static_cast<int>(ceil_div(p.out_height, rows_per_tile));
  params.channel_tiles = static_cast<int>(ceil_div(p.in_channels, kTileRows));
  params.k_tiles = static_cast<int>(p.batch * params.row_groups * params.row_tiles);
  // Partial sums of the split pixel sum are added in a fixed order (deterministic).
  const long long taps = p.kernel * p.kernel;
  const long long tiles = taps * params.channel_tiles * ceil_div(p.out_channels, kTileRows);
  const long long splits = k_splits(ctx, 2, tiles, params.k_tiles);
  params.tiles_per_split = static_cast<int>(ceil_div(params.k_tiles, splits));
  const long long used_splits = ceil_div(params.k_tiles, params.tiles_per_split);
  const long long grad_size = p.out_channels * p.in_channels * taps;
  params.partial = grown_scratch(ctx, scratch.weight_sums, {used_splits, grad_size}, DType::f32).data<float>();

  const dim3 grid(static_cast<unsigned>(taps * params.channel_tiles),
                  static_cast<unsigned>(ceil_div(p.out_channels, kTileRows)), static_cast<unsigned>(used_splits));
  if (nhwc) launch_weight_grad<true, true>(ctx, grid, operands, params);
  else if (bf16) launch_weight_grad<true, false>(ctx, grid, operands, params);
  else launch_weight_grad<false, false>(ctx, grid, operands, params);
  const long long tap_size = p.out_channels * p.in_channels;
  sum_tap_partials_kernel<<<static_cast<unsigned>(ceil_div(tap_size, kSumPairs)), kSumThreads, 0, cuda::stream(ctx)>>>(
      params.partial, static_cast<int>(used_splits), static_cast<int>(taps), tap_size, weight_grad);
  cuda::check_launch("sum_tap_partials_kernel", __FILE__, __LINE__);
}

}  // namespace plexus::layers::implicit_gemm::detail
