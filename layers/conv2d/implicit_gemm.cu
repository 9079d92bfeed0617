// CUDA implicit-GEMM convolution engine (mappings and formulas in implicit_gemm.h).
//
// Every pass is a GEMM C[M, N] = A[M, K] B[K, N] on tensor cores, f32
// accumulators: TF32 mma.sync m16n8k8 or, when the Context's precision is
// bf16, BF16 m16n8k16 (Tf32Product, Bf16Product):
//   forward          M = Co, N = batch*Ho*Wo output pixels, K = Ci*k*k taps;
//                    A = the weight, B = input patches gathered on the fly
//                    (from an NHWC copy of X when Ci >= kTapMajorChannels).
//   backward_data    per phase (h mod s, w mod s): M = Ci, N = the phase's
//                    pixels, K = Co * (the taps reaching that phase);
//                    A = the weight re-packed per phase, B = gathered Y
//                    (from an NHWC copy of Y when Co >= kTapMajorChannels).
//   backward_weight  M = Co, N = Ci*k*k, K = batch*Ho*Wo pixels, split over
//                    blocks; A = Y, B = input patches (from an NHWC copy of
//                    X when Ci is a multiple of 128); partial sums reduced.
// A thread block computes a BM x BN tile of C, walking K in stages of BK
// through a STAGES-deep cp.async ring in shared memory (see Tile); each of its
// 8 warps owns a (BM/WARPS_M) x (BN/WARPS_N) sub-tile of m16n8 accumulators.
// When the tiles of C would not fill the GPU once, K is also split over
// blocks and the partial sums are added in a fixed order (deterministic).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "conv2d/channel_ops.h"
#include "conv2d/implicit_gemm.h"
#include "conv2d/nhwc_layout.h"
#include "conv2d/scratch.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers::implicit_gemm {

namespace {

constexpr int kThreads = 256;  // 8 warps per block
// A K-contiguous tile is [rows][BK + 4]: a row stride of 20 or 36 words puts
// the 32 fragment reads of a warp (rows g, columns t) in 32 different banks.
// An N-contiguous tile is [BK][BN + 8]: a stride of 8 (mod 32) words does the same.
constexpr int kColumnPad = 8;
// A tap row offset that no bounds check accepts (images are at most kMaxExtent high and wide).
constexpr int kInvalidTap = 1 << 14;
static_assert(kInvalidTap > kMaxExtent + 64, "an invalid tap must fail every bounds check");

long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }
long long round_up(long long a, long long b) { return ceil_div(a, b) * b; }

__device__ inline unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// 4-byte asynchronous copy global -> shared; when !valid it writes 0 and reads nothing.
__device__ inline void copy4_async(float* destination, const float* source, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(destination)),
               "l"(source), "r"(valid ? 4 : 0));
}

// 16-byte asynchronous copy (both addresses 16-byte aligned), bypassing L1.
__device__ inline void copy16_async(float* destination, const float* source) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(destination)), "l"(source));
}

// 16-byte asynchronous copy; when !valid it writes zeros and reads nothing.
__device__ inline void copy16_async_zfill(float* destination, const float* source, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(destination)), "l"(source),
               "r"(valid ? 16 : 0));
}

__device__ inline void commit_async() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `pending` committed groups are still in flight.
template <int pending>
__device__ inline void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

// Four 8x4 f32 matrices from shared memory in one instruction (ldmatrix
// reads them as 8x8 b16): lane l gives the address of row l%8 of matrix l/8
// and receives, from each matrix q, the f32 at (row lane/4, column lane%4).
__device__ inline void load_matrix_x4(unsigned (&r)[4], const float* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row_address)));
}

// d += a b for one 16x8x8 tile. a and b hold f32 bit patterns; the tensor core
// reads them as TF32 (the low 13 mantissa bits are dropped).
__device__ inline void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a b for one 16x8x16 tile of bf16 operands (two per register, the
// lower k in the low half), f32 accumulation.
__device__ inline void mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two f32 (bit patterns) rounded to bf16, nearest even, packed: low in bits 0-15.
__device__ inline unsigned pack_bf16x2(unsigned low, unsigned high) {
  unsigned packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(__uint_as_float(high)), "f"(__uint_as_float(low)));
  return packed;
}

// The tensor-core product the engine runs, chosen by the Context's precision.
// Both consume the same fragments, read from the same f32 tiles in shared
// memory: kGroups m16n8k8 TF32 fragment sets, set i at k offset 8i of the
// step (a = A(g, t), A(g+8, t), A(g, t+4), A(g+8, t+4); b = B(t, g),
// B(t+4, g); g = lane/4, t = lane%4).
//
// Tf32Product: one m16n8k8 TF32 mma per fragment set.
struct Tf32Product {
  static constexpr int kGroups = 1;
  __device__ static void multiply(float (&d)[4], const unsigned (&a)[1][4], const unsigned (&b)[1][2]) {
    mma_tf32(d, a[0], b[0]);
  }
};

// Bf16Product: one m16n8k16 BF16 mma over both sets, operands rounded to bf16
// here, as the fragments are formed. The mma wants thread t to hold k = 2t,
// 2t+1 (and 2t+8, 2t+9) of its rows and columns; it holds k = t, t+4 (and
// t+8, t+12) instead. A sum over k does not depend on the order of its terms,
// so the mma's k 2t, 2t+1, 2t+8, 2t+9 are taken to mean the tile's k t, t+4,
// t+8, t+12 in A and in B alike: the product is the same, with no shuffle.
struct Bf16Product {
  static constexpr int kGroups = 2;
  __device__ static void multiply(float (&d)[4], const unsigned (&a)[2][4], const unsigned (&b)[2][2]) {
    const unsigned a16[4] = {pack_bf16x2(a[0][0], a[0][2]), pack_bf16x2(a[0][1], a[0][3]),
                             pack_bf16x2(a[1][0], a[1][2]), pack_bf16x2(a[1][1], a[1][3])};
    const unsigned b16[2] = {pack_bf16x2(b[0][0], b[0][1]), pack_bf16x2(b[1][0], b[1][1])};
    mma_bf16(d, a16, b16);
  }
};

// A block's tile of C (BM x BN, 8 warps of WARPS_M x WARPS_N) and its K
// pipeline: BK per stage, STAGES-deep cp.async ring. BLOCKS: the blocks per
// multiprocessor the registers are budgeted for (launch bounds; 1 lets a
// thread use up to 255 registers, for warp tiles of 64x64).
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int BK_, int STAGES_, int BLOCKS_ = 2>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int BK = BK_, STAGES = STAGES_, BLOCKS = BLOCKS_;
  static constexpr int KStride = BK + 4;  // row stride of a K-contiguous tile
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // one warp's sub-tile
  static constexpr int MT = WM / 16, NT = WN / 8;            // its m16n8 accumulator tiles
  static_assert(WARPS_M * WARPS_N * 32 == kThreads, "8 warps");
  static_assert(WM % 16 == 0 && WN % 8 == 0, "warp tile of whole mma tiles");
  static_assert(BLOCKS == 1 || BLOCKS == 2, "one or two blocks per multiprocessor");
};
// Warp tile 64x32. The gather GEMMs take 32 of K per stage (fewer barriers per
// product). FlatGatherTile (few source channels, NCHW, one table entry per
// element) is double-buffered so two blocks fit a multiprocessor with its
// tables (measured ~3% faster than 16 per stage in a 3-deep ring on an H100).
// NhwcGatherTile (tap-major K from the NHWC copy) is 3-deep, two blocks still
// fit (2 x 111 KiB): on an H100 the conv benchmark's 128-channel rows summed
// to 10.13 ms with it, 10.47 ms 2-deep, 10.29 / 10.53 ms with 128x256 tiles
// 3- / 2-deep (tools/conv-tile-sweep.sh). The weight gradient from NCHW
// keeps 16 per stage (its per-thread column tables would not fit the
// registers at 32) in a 3-deep ring.
using FlatGatherTile = Tile<128, 128, 2, 4, 32, 2>;
using NhwcGatherTile = Tile<128, 128, 2, 4, 32, 3>;
template <bool tap_major>
using GatherTile = std::conditional_t<tap_major, NhwcGatherTile, FlatGatherTile>;
using WeightGradTile = Tile<128, 128, 2, 4, 16, 3>;
// The tap-major weight gradient (Ci a multiple of 128) reads B from NHWC with
// no column tables, so it takes 32 per stage, 3-deep: the fastest of BK 16/32
// x 3/4 stages on an H100 (tools/bench/wgrad-variants.sh; 128->128 layers at
// 64x64 and up 1.05x-1.09x faster backward than 16 x 3; 32 x 4 fits one block
// per multiprocessor and is slower).
using WeightGradNhwcTile = Tile<128, 128, 2, 4, 32, 3>;
static_assert(kTapAlign % FlatGatherTile::BK == 0, "flat tap tables are whole stages");
static_assert(NhwcGatherTile::BK % kTapAlign == 0, "tap-major K (taps x channel_pad) is a multiple of kTapAlign");

// Floats of one pipeline stage of the gather GEMM's B tile: K-contiguous
// [BN][KStride] when K is tap-major (pixels of the NHWC copy, 16 bytes per
// copy), else N-contiguous [BK][BN + kColumnPad] (one element per copy).
template <class T, bool tap_major>
__host__ __device__ constexpr int gather_b_stage() {
  return tap_major ? T::BN * T::KStride : T::BK * (T::BN + kColumnPad);
}

// The products of one pipeline stage: acc += A_tile B_tile over BK, in steps
// of 8 * Product::kGroups.
// A is [BM][KStride] (K contiguous). B is [BN][KStride] when
// b_k_contiguous, else [BK][BN + kColumnPad]. Fragment layouts of
// m16n8k8 (g = lane/4, t = lane%4): a = A(g, t), A(g+8, t), A(g, t+4),
// A(g+8, t+4); b = B(k=t, n=g), B(k=t+4, n=g). b_ldmatrix (K-contiguous B
// only): the b fragments of two n8 tiles come from one ldmatrix, like A's.
template <class Product, class T, bool b_k_contiguous, bool b_ldmatrix = false>
__device__ inline void multiply_stage(const float* a_tile, const float* b_tile, int warp_m0, int warp_n0, int lane,
                                      float (&acc)[T::MT][T::NT][4]) {
  const int g = lane >> 2, t = lane & 3;
  constexpr int kKStride = T::KStride, kGroups = Product::kGroups;
  static_assert(T::KStride % 4 == 0, "ldmatrix rows are 16-byte aligned");
  static_assert(T::BK % (8 * kGroups) == 0, "a stage is whole product steps");
  static_assert(!b_ldmatrix || (b_k_contiguous && T::NT % 2 == 0), "ldmatrix reads pairs of K-contiguous n8 tiles");
#pragma unroll
  for (int k_step = 0; k_step < T::BK; k_step += 8 * kGroups) {
    unsigned a[T::MT][kGroups][4], b[T::NT][kGroups][2];
#pragma unroll
    for (int group = 0; group < kGroups; ++group) {
      const int k8 = k_step + 8 * group;
      // A fragments by ldmatrix: matrices (rows 0-7 | 8-15) x (k 0-3 | 4-7) give
      // a0..a3 in order when lane l points at row l%8 + 8*((l/8)&1), k 4*(l/16).
      const int quad = lane >> 3;
#pragma unroll
      for (int mt = 0; mt < T::MT; ++mt)
        load_matrix_x4(a[mt][group], a_tile + (warp_m0 + mt * 16 + (lane & 7) + 8 * (quad & 1)) * kKStride + k8 +
                                         4 * (quad >> 1));
      if constexpr (b_ldmatrix) {
        // Matrices (n8 tile nt | nt+1) x (k 0-3 | 4-7) give b[nt][0], b[nt][1],
        // b[nt+1][0], b[nt+1][1] when lane l points at row l%8 of tile
        // nt + l/16, k 4*((l/8)&1).
#pragma unroll
        for (int nt = 0; nt < T::NT; nt += 2) {
          unsigned r[4];
          load_matrix_x4(r, b_tile + (warp_n0 + (nt + (quad >> 1)) * 8 + (lane & 7)) * kKStride + k8 +
                                4 * (quad & 1));
          b[nt][group][0] = r[0];
          b[nt][group][1] = r[1];
          b[nt + 1][group][0] = r[2];
          b[nt + 1][group][1] = r[3];
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < T::NT; ++nt) {
          if constexpr (b_k_contiguous) {
            const float* p = b_tile + (warp_n0 + nt * 8 + g) * kKStride + k8 + t;
            b[nt][group][0] = __float_as_uint(p[0]);
            b[nt][group][1] = __float_as_uint(p[4]);
          } else {
            constexpr int stride = T::BN + kColumnPad;
            const float* p = b_tile + (k8 + t) * stride + warp_n0 + nt * 8 + g;
            b[nt][group][0] = __float_as_uint(p[0]);
            b[nt][group][1] = __float_as_uint(p[4 * stride]);
          }
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < T::MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < T::NT; ++nt) Product::multiply(acc[mt][nt], a[mt], b[nt]);
  }
}

// ---------------------------------------------------------------------------
// forward and backward_data: C = packed weight x gathered source pixels.

// One GEMM of a gather launch (forward: the only one; backward_data: one per
// phase). Its N index walks the points (u, v) of a grid_h x grid_w
// sub-grid of each destination image:
//   destination pixel (u*dest_scale + dest_row0, v*dest_scale + dest_col0),
//   source pixel of tap (ti, tj): (u*source_scale + source_row0 + tap_step*ti,
//                                 v*source_scale + source_col0 + tap_step*tj).
// Its K index is tap-major when the source has >= kTapMajorChannels channels:
// k = (ti*taps_w + tj)*channel_pad + c, c < channel_pad = the channels
// rounded up to BK, so a stage of K is BK channels of one tap. The source is
// then read from an NHWC copy with channel_pad channels (zeros beyond the
// real ones; nhwc_layout.h), where those BK channels of one pixel are
// contiguous: a stage loads BK/4 aligned 16-byte chunks per pixel, with one
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
  long long a_offset;  // this part's A [m_pad][k_stride] within GatherParams::a
};

struct GatherParams {
  const float* a;       // packed weight
  const float* source;  // tap-major: NHWC [batch, source_h, source_w, channel_pad]; flat: NCHW
  const float* bias;    // [m_size] or null
  float* dest;          // [batch, m_size, dest_h, dest_w]
  int m_size;
  int batch;
  int source_channels, source_h, source_w;
  int dest_h, dest_w;
  int source_scale, dest_scale;
  int channel_pad;  // tap-major: source channels rounded up to BK; 0 when K is flat
  int part_count;
  int splits;         // > 1: blockIdx.z / part_count picks a slice of K, written to partial
  float* partial;     // [splits][batch, m_size, dest_h, dest_w] when splits > 1 (no bias)
  long long dest_size;  // batch * m_size * dest_h * dest_w
  GatherPart parts[kMaxPhases];
};

// grid = (N tiles of the largest part, M tiles, parts x K splits). Each block first
// writes its part's tap table to shared memory: entry k holds the source
// offset of tap k relative to the pixel's base and the tap's (row, column)
// displacement for the bounds check, so the gather needs no division.
template <class Product, class T, bool tap_major>
__global__ void __launch_bounds__(kThreads, T::BLOCKS) gather_gemm_kernel(const GatherParams params) {
  const GatherPart& part = params.parts[blockIdx.z % params.part_count];
  const int split = blockIdx.z / params.part_count;
  const int grid_plane = part.grid_h * part.grid_w;
  const long long n_size = static_cast<long long>(params.batch) * grid_plane;
  const long long n0 = static_cast<long long>(blockIdx.x) * T::BN;
  if (n0 >= n_size) return;  // the whole block: this part has fewer tiles than the largest
  const int m0 = blockIdx.y * T::BM;
  const int tid = threadIdx.x;

  constexpr int kTileK = T::BK, kStages = T::STAGES, kKStride = T::KStride;
  extern __shared__ __align__(16) float shared[];
  float* a_tiles = shared;                                        // kStages x [BM][kKStride]
  constexpr int a_stage = T::BM * kKStride, b_stage = gather_b_stage<T, tap_major>();
  float* b_tiles = a_tiles + kStages * a_stage;  // kStages x (tap-major: [BN][kKStride]; flat: [kTileK][BN + pad])
  int2* taps = reinterpret_cast<int2*>(b_tiles + kStages * b_stage);

  const int source_plane = params.source_h * params.source_w;
  const int taps_per_channel = part.taps_h * part.taps_w;
  if constexpr (tap_major) {
    // Entry t: the pixel offset and displacement of tap t = ti*taps_w + tj.
    for (int tap = tid; tap < taps_per_channel; tap += kThreads) {
      const int di = (tap / part.taps_w) * part.tap_step, dj = (tap % part.taps_w) * part.tap_step;
      taps[tap] = make_int2(di * params.source_w + dj,
                            static_cast<int>((static_cast<unsigned>(di) << 16) | (static_cast<unsigned>(dj) & 0xffffu)));
    }
  }
  for (int k = tid; !tap_major && k < part.k_stride; k += kThreads) {
    int2 entry;
    if (k < part.k_size) {
      const int channel = k / taps_per_channel, tap = k - channel * taps_per_channel;
      const int di = (tap / part.taps_w) * part.tap_step, dj = (tap % part.taps_w) * part.tap_step;
      entry.x = channel * source_plane + di * params.source_w + dj;
      entry.y = static_cast<int>((static_cast<unsigned>(di) << 16) | (static_cast<unsigned>(dj) & 0xffffu));
    } else {
      entry.x = 0;
      entry.y = static_cast<int>(static_cast<unsigned>(kInvalidTap) << 16);
    }
    taps[k] = entry;
  }

  // B loads. The pixels (tile columns) this thread loads are fixed, so they
  // are decoded once. Tap-major: thread tid copies 16-byte chunk tid % chunks
  // of the stage's BK channels for pixels tid / chunks + r * pixel_step
  // (BK/4 neighbouring threads read one pixel's BK contiguous floats, and
  // write one row of the tile: no bank conflicts). Flat: it copies column
  // tid % BN for rows tid / BN + r * b_row_step.
  constexpr int b_chunks = kTileK / 4, b_pixel_step = kThreads / b_chunks;
  constexpr int b_pixels = tap_major ? T::BN / b_pixel_step : 1;
  static_assert(!tap_major || T::BN % b_pixel_step == 0, "whole chunk passes over the tile's pixels");
  constexpr int b_row_step = kThreads / T::BN;
  constexpr int b_loads = kTileK / b_row_step;
  const int b_chunk = tid % b_chunks;
  const int b_column = tap_major ? tid / b_chunks : tid % T::BN, b_row = tid / T::BN;
  // b_base: tap-major, the pixel's index in the batch's NHWC pixels (fits an
  // int: supports() bounds batch * plane); flat, its NCHW element offset.
  std::conditional_t<tap_major, int, long long> b_base[b_pixels];
  int row0[b_pixels], col0[b_pixels];
#pragma unroll
  for (int r = 0; r < b_pixels; ++r) {
    const long long n = n0 + b_column + r * b_pixel_step;
    b_base[r] = 0;
    row0[r] = -(1 << 24);  // an invalid column fails every bounds check
    col0[r] = 0;
    if (n < n_size) {
      const int image = static_cast<int>(n / grid_plane);
      const int q = static_cast<int>(n - static_cast<long long>(image) * grid_plane);
      const int u = q / part.grid_w, v = q - (q / part.grid_w) * part.grid_w;
      row0[r] = u * params.source_scale + part.source_row0;
      col0[r] = v * params.source_scale + part.source_col0;
      const int pixel = row0[r] * params.source_w + col0[r];
      if constexpr (tap_major)
        b_base[r] = image * source_plane + pixel;
      else
        b_base[r] = static_cast<long long>(image) * params.source_channels * source_plane + pixel;
    }
  }
  const float* a_rows = params.a + part.a_offset + static_cast<long long>(m0) * part.k_stride;

  auto load_stage = [&](int stage, int k_tile) {
    float* a_tile = a_tiles + stage * a_stage;
    constexpr int a_vectors = T::BM * kTileK / 4;
#pragma unroll
    for (int i = tid; i < a_vectors; i += kThreads) {
      const int row = i / (kTileK / 4), k4 = (i % (kTileK / 4)) * 4;
      copy16_async(a_tile + row * kKStride + k4,
                   a_rows + static_cast<long long>(row) * part.k_stride + k_tile * kTileK + k4);
    }
    float* b_tile = b_tiles + stage * b_stage;
    if constexpr (tap_major) {
      // Stage k_tile is channels [c0, c0 + BK) of one tap: per pixel, BK
      // contiguous floats of the NHWC copy (zeros past the real channels).
      const int tiles_per_tap = params.channel_pad / kTileK;
      const int tap = k_tile / tiles_per_tap;
      const int c0 = (k_tile - tap * tiles_per_tap) * kTileK;
      const int2 entry = taps[tap];
      const int di = entry.y >> 16, dj = static_cast<short>(entry.y & 0xffff);
      const float* source = params.source + c0 + 4 * b_chunk;
#pragma unroll
      for (int r = 0; r < b_pixels; ++r) {
        const bool inside = static_cast<unsigned>(row0[r] + di) < static_cast<unsigned>(params.source_h) &&
                            static_cast<unsigned>(col0[r] + dj) < static_cast<unsigned>(params.source_w);
        const long long offset = static_cast<long long>(b_base[r] + entry.x) * params.channel_pad;
        copy16_async_zfill(b_tile + (b_column + r * b_pixel_step) * kKStride + 4 * b_chunk,
                           inside ? source + offset : params.source, inside);
      }
    } else {
      // Flat K: one table entry per element.
#pragma unroll
      for (int r = 0; r < b_loads; ++r) {
        const int k_local = b_row + r * b_row_step;
        const int2 entry = taps[k_tile * kTileK + k_local];
        const int di = entry.y >> 16, dj = static_cast<short>(entry.y & 0xffff);
        const bool inside = static_cast<unsigned>(row0[0] + di) < static_cast<unsigned>(params.source_h) &&
                            static_cast<unsigned>(col0[0] + dj) < static_cast<unsigned>(params.source_w);
        copy4_async(b_tile + k_local * (T::BN + kColumnPad) + b_column,
                    inside ? params.source + b_base[0] + entry.x : params.source, inside);
      }
    }
  };

  float acc[T::MT][T::NT][4];
#pragma unroll
  for (int mt = 0; mt < T::MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
  const int warp = tid / 32, lane = tid % 32;
  const int warp_m0 = (warp / T::WARPS_N) * T::WM, warp_n0 = (warp % T::WARPS_N) * T::WN;
  // This split's K tiles [k_first, k_first + k_tiles); a split may be empty (it then writes zeros).
  const int all_k_tiles = part.k_stride / kTileK;
  const int tiles_per_split = (all_k_tiles + params.splits - 1) / params.splits;
  const int k_first = min(all_k_tiles, split * tiles_per_split);
  const int k_tiles = min(all_k_tiles, k_first + tiles_per_split) - k_first;

  __syncthreads();  // the tap table is complete
#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (stage < k_tiles) load_stage(stage, k_first + stage);
    commit_async();
  }
  for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
    wait_async<kStages - 2>();  // tile k_tile has landed (for this thread) ...
    __syncthreads();            // ... for every thread, and the stage about to be refilled is no longer read
    const int next = k_tile + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, k_first + next);
    commit_async();
    const int stage = k_tile % kStages;
    multiply_stage<Product, T, tap_major, tap_major>(a_tiles + stage * a_stage, b_tiles + stage * b_stage, warp_m0,
                                                     warp_n0, lane, acc);
  }
  wait_async<0>();

  // Epilogue: accumulator (g [+8], 2t [+1]) of each mma tile -> dest, plus bias.
  const int g = lane >> 2, t = lane & 3;
  const int dest_plane = params.dest_h * params.dest_w;
  long long column_offset[T::NT][2];
#pragma unroll
  for (int nt = 0; nt < T::NT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const long long n = n0 + warp_n0 + nt * 8 + 2 * t + c;
      column_offset[nt][c] = -1;
      if (n < n_size) {
        const int image = static_cast<int>(n / grid_plane);
        const int q = static_cast<int>(n - static_cast<long long>(image) * grid_plane);
        const int u = q / part.grid_w, v = q - (q / part.grid_w) * part.grid_w;
        column_offset[nt][c] = static_cast<long long>(image) * params.m_size * dest_plane +
                               static_cast<long long>(u * params.dest_scale + part.dest_row0) * params.dest_w +
                               v * params.dest_scale + part.dest_col0;
      }
    }
#pragma unroll
  for (int mt = 0; mt < T::MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = m0 + warp_m0 + mt * 16 + g + 8 * half;
      if (m >= params.m_size) continue;
      const bool whole = params.splits == 1;  // else a partial sum: bias and the sum come in reduce_splits
      const float bias = whole && params.bias ? params.bias[m] : 0.0f;
      float* dest = (whole ? params.dest : params.partial + split * params.dest_size) +
                    static_cast<long long>(m) * dest_plane;
#pragma unroll
      for (int nt = 0; nt < T::NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c)
          if (column_offset[nt][c] >= 0) dest[column_offset[nt][c]] = acc[mt][nt][2 * half + c] + bias;
    }
}

// dest[n, m, q] = bias[m] + sum over splits of partial[split][n, m, q];
// grid-stride, consecutive threads on consecutive q (coalesced).
__global__ void reduce_splits_kernel(const float* partial, int splits, long long size, int m_size, int plane,
                                     const float* bias, float* dest) {
  for (long long index = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; index < size;
       index += static_cast<long long>(gridDim.x) * blockDim.x) {
    float sum = bias ? bias[(index / plane) % m_size] : 0.0f;
    for (int split = 0; split < splits; ++split) sum += partial[split * size + index];
    dest[index] = sum;
  }
}

// Packs the weight W [Co, Ci, k, k] into each part's A [m_pad][k_stride],
// zero beyond m_size and k_size:
//   forward:        A[o][(c, i, j)]   = W[o, c, i, j]
//   backward_data:  A[c][(o, ti, tj)] = W[o, c, tap_row0 + s*ti, tap_col0 + s*tj]
// grid.y = part; grid-stride over the part's elements.
struct PackPart {
  int k_size, k_stride, taps_h, taps_w, tap_row0, tap_col0;
  long long offset;
};

struct PackParams {
  const float* weight;
  float* packed;
  int m_size, m_pad;
  int in_channels, kernel, stride;
  bool transpose;    // backward_data
  int channels;      // source channels: Ci (forward) or Co (backward_data)
  int channel_pad;   // tap-major K (see GatherPart); 0: flat K
  PackPart parts[kMaxPhases];
};

__global__ void pack_weight_kernel(const PackParams params) {
  const PackPart& part = params.parts[blockIdx.y];
  const long long total = static_cast<long long>(params.m_pad) * part.k_stride;
  for (long long index = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; index < total;
       index += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int m = static_cast<int>(index / part.k_stride), k = static_cast<int>(index % part.k_stride);
    float value = 0.0f;
    if (m < params.m_size && k < part.k_size && params.channel_pad > 0) {
      // Tap-major: k = tap*channel_pad + c.
      const int tap = k / params.channel_pad, c = k % params.channel_pad;
      const int i = part.tap_row0 + params.stride * (tap / part.taps_w);
      const int j = part.tap_col0 + params.stride * (tap % part.taps_w);
      const long long o = params.transpose ? c : m, ci = params.transpose ? m : c;
      if (c < params.channels)
        value = params.weight[((o * params.in_channels + ci) * params.kernel + i) * params.kernel + j];
    } else if (m < params.m_size && k < part.k_size) {
      if (!params.transpose) {
        value = params.weight[static_cast<long long>(m) * part.k_size + k];
      } else {
        const int taps = part.taps_h * part.taps_w;
        const int o = k / taps, tap = k % taps;
        const int i = part.tap_row0 + params.stride * (tap / part.taps_w);
        const int j = part.tap_col0 + params.stride * (tap % part.taps_w);
        value = params.weight[((static_cast<long long>(o) * params.in_channels + m) * params.kernel + i) *
                                  params.kernel +
                              j];
      }
    }
    params.packed[part.offset + index] = value;
  }
}

// ---------------------------------------------------------------------------
// backward_weight: partial[split][o][(c, i, j)] = sum over this split's pixels.

struct WeightGradParams {
  const float* x;       // [batch, Ci, H, W]
  const float* x_nhwc;  // the same, [batch, H*W, Ci] (tap_major only)
  const float* y;       // [batch, Co, Ho, Wo]
  float* partial;       // [splits][Co][Ci*k*k]
  int in_channels, height, width, out_channels, out_height, out_width, kernel, stride, padding;
  long long k_size;       // batch*Ho*Wo
  long long k_per_split;  // a multiple of the tile's BK
};

// A pixel (image, a, b) of the output, stepped forward through the batch
// without a division per step (tiles load in order).
struct PixelCursor {
  long long index;  // image * Ho*Wo + a * Wo + b
  int image, a, b;

  __device__ PixelCursor(long long first, long long k_end, int out_plane, int out_width)
      : index(first), image(0), a(0), b(0) {
    if (first < k_end) {
      image = static_cast<int>(first / out_plane);
      const int q = static_cast<int>(first - static_cast<long long>(image) * out_plane);
      a = q / out_width;
      b = q - a * out_width;
    }
  }
  __device__ void advance(int count, int out_height, int out_width) {
    index += count;
    b += count;
    while (b >= out_width) {
      b -= out_width;
      if (++a == out_height) {
        a = 0;
        ++image;
      }
    }
  }
};

// grid = (N tiles, M tiles, splits). A is K-contiguous [BM][KStride]: a
// thread loads pixel tid%BK of the tile for BM/(256/BK) rows (channels o).
// B (input patches), by variant:
//   tap_major (Ci a multiple of BN, N ordered n = tap*Ci + c, so the block's
//     columns are BN channels of one tap): read from the NHWC copy of X,
//     where those channels are contiguous for each pixel. B is N-contiguous
//     [BK][BN + kColumnPad]; 256/BK threads share a pixel (one bounds check)
//     and copy its BN channels 16 bytes at a time, consecutive threads on
//     consecutive channels (coalesced reads, conflict-free stores; the
//     fragment reads are conflict-free by kColumnPad). The epilogue writes
//     dW[o, c, tap] in place.
//   otherwise: from NCHW, K-contiguous [BN][KStride]: a thread loads pixel
//     tid%BK for BN/(256/BK) columns (taps (c, i, j), decoded once).
// vector_a: Ho*Wo is a multiple of BK, so every tile of A is BK pixels of
// one image, 16-byte aligned (k_per_split is a multiple of BK too).
template <class Product, class T, bool vector_a, bool tap_major>
__global__ void __launch_bounds__(kThreads, T::BLOCKS) weight_grad_kernel(const WeightGradParams params) {
  constexpr int kTileK = T::BK, kStages = T::STAGES, kKStride = T::KStride;
  constexpr int kBStride = T::BN + kColumnPad;  // row stride of the N-contiguous B tile
  const int m_size = params.out_channels;
  const int kk = params.kernel * params.kernel;
  const int n_size = params.in_channels * kk;
  const int n0 = blockIdx.x * T::BN, m0 = blockIdx.y * T::BM;
  const long long k_begin = blockIdx.z * params.k_per_split;
  const long long k_end = min(params.k_size, k_begin + params.k_per_split);
  const int k_tiles = k_end > k_begin ? static_cast<int>((k_end - k_begin + kTileK - 1) / kTileK) : 0;
  const int tid = threadIdx.x;

  extern __shared__ __align__(16) float shared[];
  float* a_tiles = shared;                                // kStages x [BM][kKStride]
  float* b_tiles = a_tiles + kStages * T::BM * kKStride;  // kStages x B tile (see above)
  constexpr int a_stage = T::BM * kKStride, b_stage = tap_major ? kTileK * kBStride : T::BN * kKStride;

  const int k_local = tid % kTileK, lane_row = tid / kTileK;
  constexpr int row_step = kThreads / kTileK;
  constexpr int a_loads = T::BM / row_step, b_loads = T::BN / row_step;
  // tap_major: pixel b_row of the tile, channel vectors b_vector + j*row_step.
  const int b_row = tid / row_step, b_vector = tid % row_step;
  constexpr int b_vectors = T::BN / 4 / row_step;
  static_assert(T::BN % (4 * row_step) == 0, "whole channel vectors per thread");
  const int plane = params.height * params.width;
  // tap_major: the block's tap (ti, tj) and first channel.
  const int block_tap = n0 / params.in_channels, block_channel = n0 - block_tap * params.in_channels;
  const int tap_i = block_tap / params.kernel, tap_j = block_tap % params.kernel;
  int column_offset[b_loads], column_tap[b_loads];
#pragma unroll
  for (int r = 0; r < b_loads && !tap_major; ++r) {
    const int n = n0 + lane_row + r * row_step;
    if (n < n_size) {
      const int c = n / kk, i = (n % kk) / params.kernel, j = n % params.kernel;
      column_offset[r] = c * plane + i * params.width + j;
      column_tap[r] = (i << 16) | j;
    } else {
      column_offset[r] = 0;
      column_tap[r] = kInvalidTap << 16;
    }
  }
  const int out_plane = params.out_height * params.out_width;

  // This thread's pixel in the next tile to load: k_local for the scalar
  // loads (A unless vector_a, B from NCHW), b_row for B from NHWC.
  PixelCursor pixel(k_begin + k_local, k_end, out_plane, params.out_width);
  PixelCursor b_pixel(k_begin + b_row, k_end, out_plane, params.out_width);
  // The tile's first pixel, for the vector loads of A (whole tiles within one image).
  int tile_image = static_cast<int>(k_begin / out_plane);
  int tile_q = static_cast<int>(k_begin - static_cast<long long>(tile_image) * out_plane);

  auto load_stage = [&](int stage) {
    const bool pixel_valid = pixel.index < k_end;
    float* a_tile = a_tiles + stage * a_stage;
    if constexpr (vector_a) {
      // 4 consecutive pixels of one channel per 16-byte copy.
      const float* y_tile = params.y + static_cast<long long>(tile_image) * m_size * out_plane + tile_q;
#pragma unroll
      for (int i = tid; i < T::BM * kTileK / 4; i += kThreads) {
        const int row = i / (kTileK / 4), k4 = (i % (kTileK / 4)) * 4;
        const bool valid = m0 + row < m_size;
        copy16_async_zfill(a_tile + row * kKStride + k4,
                           valid ? y_tile + static_cast<long long>(m0 + row) * out_plane + k4 : params.y, valid);
      }
      tile_q += kTileK;
      if (tile_q == out_plane) {
        tile_q = 0;
        ++tile_image;
      }
    } else {
      const float* y_pixel =
          params.y + static_cast<long long>(pixel.image) * m_size * out_plane + pixel.a * params.out_width + pixel.b;
#pragma unroll
      for (int r = 0; r < a_loads; ++r) {
        const int m = m0 + lane_row + r * row_step;
        const bool valid = pixel_valid && m < m_size;
        copy4_async(a_tile + (lane_row + r * row_step) * kKStride + k_local,
                    valid ? y_pixel + static_cast<long long>(m) * out_plane : params.y, valid);
      }
    }
    float* b_tile = b_tiles + stage * b_stage;
    if constexpr (tap_major) {
      // Source pixel (a*s - p + ti, b*s - p + tj): BN channels from block_channel on, zero outside the image.
      const int row = b_pixel.a * params.stride - params.padding + tap_i;
      const int col = b_pixel.b * params.stride - params.padding + tap_j;
      const bool inside = b_pixel.index < k_end && static_cast<unsigned>(row) < static_cast<unsigned>(params.height) &&
                          static_cast<unsigned>(col) < static_cast<unsigned>(params.width);
      const long long offset =
          inside ? (static_cast<long long>(b_pixel.image) * plane + row * params.width + col) * params.in_channels +
                       block_channel + 4 * b_vector
                 : 0;
#pragma unroll
      for (int j = 0; j < b_vectors; ++j)
        copy16_async_zfill(b_tile + b_row * kBStride + 4 * (b_vector + j * row_step),
                           params.x_nhwc + offset + (inside ? 4 * j * row_step : 0), inside);
      b_pixel.advance(kTileK, params.out_height, params.out_width);
    } else {
      const int y0 = pixel_valid ? pixel.a * params.stride - params.padding : -(1 << 24);
      const int x0 = pixel.b * params.stride - params.padding;
      const long long x_base = static_cast<long long>(pixel.image) * params.in_channels * plane +
                               static_cast<long long>(y0) * params.width + x0;
#pragma unroll
      for (int r = 0; r < b_loads; ++r) {
        const int di = column_tap[r] >> 16, dj = column_tap[r] & 0xffff;
        const bool inside = static_cast<unsigned>(y0 + di) < static_cast<unsigned>(params.height) &&
                            static_cast<unsigned>(x0 + dj) < static_cast<unsigned>(params.width);
        copy4_async(b_tile + (lane_row + r * row_step) * kKStride + k_local,
                    inside ? params.x + x_base + column_offset[r] : params.x, inside);
      }
    }
    if constexpr (!vector_a || !tap_major) pixel.advance(kTileK, params.out_height, params.out_width);
  };

  float acc[T::MT][T::NT][4];
#pragma unroll
  for (int mt = 0; mt < T::MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
  const int warp = tid / 32, lane = tid % 32;
  const int warp_m0 = (warp / T::WARPS_N) * T::WM, warp_n0 = (warp % T::WARPS_N) * T::WN;

#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (stage < k_tiles) load_stage(stage);
    commit_async();
  }
  for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
    wait_async<kStages - 2>();
    __syncthreads();
    const int next = k_tile + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages);
    commit_async();
    const int stage = k_tile % kStages;
    multiply_stage<Product, T, !tap_major>(a_tiles + stage * a_stage, b_tiles + stage * b_stage, warp_m0, warp_n0,
                                           lane, acc);
  }
  wait_async<0>();

  const int g = lane >> 2, t = lane & 3;
  float* partial = params.partial + static_cast<long long>(blockIdx.z) * m_size * n_size;
#pragma unroll
  for (int mt = 0; mt < T::MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = m0 + warp_m0 + mt * 16 + g + 8 * half;
      if (m >= m_size) continue;
#pragma unroll
      for (int nt = 0; nt < T::NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int n = n0 + warp_n0 + nt * 8 + 2 * t + c;
          // tap_major: column n is channel block_channel + (n - n0) of the block's tap.
          const int index = tap_major ? (block_channel + n - n0) * kk + block_tap : n;
          if (n < n_size) partial[static_cast<long long>(m) * n_size + index] = acc[mt][nt][2 * half + c];
        }
    }
}

// ---------------------------------------------------------------------------
// Host side.

// The A and B rings plus a tap table of table_entries.
template <class T, bool tap_major>
std::size_t gather_shared_bytes(int table_entries) {
  return sizeof(float) * T::STAGES * (T::BM * T::KStride + gather_b_stage<T, tap_major>()) +
         sizeof(int2) * static_cast<std::size_t>(table_entries);
}

// A and B rings of weight_grad_kernel (B is N-contiguous when tap_major).
template <class T, bool tap_major>
std::size_t weight_grad_shared_bytes() {
  const std::size_t b_stage = tap_major ? T::BK * (T::BN + kColumnPad) : T::BN * T::KStride;
  return sizeof(float) * T::STAGES * (T::BM * T::KStride + b_stage);
}

// Opts a kernel into more than 48 KiB of dynamic shared memory (once per kernel).
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, std::size_t bytes, const char* name) {
  cuda::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
                   name, __FILE__, __LINE__);
}

int multiprocessor_count(const Context& ctx) {
  int count = 0;
  cuda::check_cuda(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, cuda::resources(ctx).device),
                   "cudaDeviceGetAttribute(multiprocessors)", __FILE__, __LINE__);
  return std::max(count, 1);
}

// Packs the weight when the kernel cannot read it in place (forward with a
// K that is a multiple of kTapAlign, M a multiple of BM and 16-byte alignment
// reads W directly). Returns A.
const float* pack_weight(const Context& ctx, const PackParams& pack, int part_count, long long total,
                         bool in_place, Tensor& buffer, PackParams& filled) {
  filled = pack;
  if (in_place) return pack.weight;
  float* packed = scratch_tensor(buffer, {total}, DType::f32, ctx.device()).data<float>();
  filled.packed = packed;
  long long largest = 0;
  for (int p = 0; p < part_count; ++p)
    largest = std::max(largest, static_cast<long long>(pack.m_pad) * pack.parts[p].k_stride);
  if (largest > 0) {
    const dim3 grid(cuda::blocks_for(largest), static_cast<unsigned>(part_count));
    pack_weight_kernel<<<grid, 256, 0, cuda::stream(ctx)>>>(filled);
    cuda::check_launch("pack_weight_kernel", __FILE__, __LINE__);
  }
  return packed;
}

// Launches gather_gemm_kernel with the given product and K order (opting it
// into its shared memory on first use).
template <class Product, bool tap_major>
void launch_gather(const Context& ctx, const GatherParams& params, dim3 grid, std::size_t shared_bytes) {
  using T = GatherTile<tap_major>;
  static const bool opted_in =
      (allow_shared_bytes(gather_gemm_kernel<Product, T, tap_major>, gather_shared_bytes<T, tap_major>(kMaxTaps),
                          "cudaFuncSetAttribute(gather_gemm_kernel)"),
       true);
  (void)opted_in;
  gather_gemm_kernel<Product, T, tap_major><<<grid, kThreads, shared_bytes, cuda::stream(ctx)>>>(params);
}

// The tap-major gather's source: an NHWC copy of the NCHW `source` [batch,
// channels, height, width] with channel_pad channels (zeros past `channels`),
// in `buffer`. nchw_to_nhwc_cuda takes at most 65535 images per call.
const float* nhwc_source(const Context& ctx, const float* source, long long batch, long long channels,
                         long long height, long long width, int channel_pad, Tensor& buffer) {
  constexpr long long kImagesPerCopy = 65535;
  float* nhwc = scratch_tensor(buffer, {batch, height, width, channel_pad}, DType::f32, ctx.device()).data<float>();
  const long long plane = height * width;
  for (long long first = 0; first < batch; first += kImagesPerCopy)
    nchw_to_nhwc_cuda(ctx, source + first * channels * plane, std::min(kImagesPerCopy, batch - first), channels,
                      plane, channel_pad, nhwc + first * plane * channel_pad);
  return nhwc;
}

// Runs the gather GEMM over params.part_count parts. When its blocks would
// not fill the GPU once (small images, long K), K is split over up to 8x more
// blocks whose partial sums reduce_splits_kernel adds (with the bias).
// tap_major: params.channel_pad > 0 and params.source is the NHWC copy.
template <bool tap_major>
void run_gather(const Context& ctx, GatherParams& params, Tensor& partial_sums) {
  using T = GatherTile<tap_major>;
  int max_k_stride = 0, max_table = 0;
  long long max_n_tiles = 0, blocks = 0;
  for (int p = 0; p < params.part_count; ++p) {
    const GatherPart& part = params.parts[p];
    max_table = std::max(max_table, tap_major ? part.taps_h * part.taps_w : part.k_stride);
    const long long n_tiles = ceil_div(static_cast<long long>(params.batch) * part.grid_h * part.grid_w, T::BN);
    max_k_stride = std::max(max_k_stride, part.k_stride);
    max_n_tiles = std::max(max_n_tiles, n_tiles);
    blocks += n_tiles * ceil_div(params.m_size, T::BM);
  }
  if (max_n_tiles == 0) return;
  const long long resident = static_cast<long long>(T::BLOCKS) * multiprocessor_count(ctx);
  const long long k_tiles = max_k_stride / T::BK;
  params.splits = static_cast<int>(std::max(1LL, std::min({resident / blocks, k_tiles / 8, 8LL})));
  params.dest_size = static_cast<long long>(params.batch) * params.m_size * params.dest_h * params.dest_w;
  params.partial = nullptr;
  if (params.splits > 1)
    params.partial =
        scratch_tensor(partial_sums, {params.splits, params.dest_size}, DType::f32, ctx.device()).data<float>();
  const dim3 grid(static_cast<unsigned>(max_n_tiles), static_cast<unsigned>(ceil_div(params.m_size, T::BM)),
                  static_cast<unsigned>(params.part_count * params.splits));
  const std::size_t shared_bytes = gather_shared_bytes<T, tap_major>(max_table);
  if (ctx.bf16_products())
    launch_gather<Bf16Product, tap_major>(ctx, params, grid, shared_bytes);
  else
    launch_gather<Tf32Product, tap_major>(ctx, params, grid, shared_bytes);
  cuda::check_launch("gather_gemm_kernel", __FILE__, __LINE__);
  if (params.splits > 1) {
    reduce_splits_kernel<<<cuda::blocks_for(params.dest_size), 256, 0, cuda::stream(ctx)>>>(
        params.partial, params.splits, params.dest_size, params.m_size, params.dest_h * params.dest_w, params.bias,
        params.dest);
    cuda::check_launch("reduce_splits_kernel", __FILE__, __LINE__);
  }
}

void run_gather(const Context& ctx, GatherParams& params, Tensor& partial_sums) {
  if (params.channel_pad > 0)
    run_gather<true>(ctx, params, partial_sums);
  else
    run_gather<false>(ctx, params, partial_sums);
}

// Rows of the gather's tile of C (the packed weight's M padding) for each K order.
int gather_tile_rows(bool tap_major) { return tap_major ? NhwcGatherTile::BM : FlatGatherTile::BM; }

// Launches weight_grad_kernel with the given product and loads, on tile T
// (opting it into its shared memory on first use).
template <class Product, class T, bool tap_major>
void launch_weight_grad(const Context& ctx, const WeightGradParams& params, dim3 grid, bool vector_a) {
  const std::size_t bytes = weight_grad_shared_bytes<T, tap_major>();
  static const bool opted_in =
      (allow_shared_bytes(weight_grad_kernel<Product, T, true, tap_major>, bytes,
                          "cudaFuncSetAttribute(weight_grad_kernel)"),
       allow_shared_bytes(weight_grad_kernel<Product, T, false, tap_major>, bytes,
                          "cudaFuncSetAttribute(weight_grad_kernel)"),
       true);
  (void)opted_in;
  cudaStream_t stream = cuda::stream(ctx);
  if (vector_a)
    weight_grad_kernel<Product, T, true, tap_major><<<grid, kThreads, bytes, stream>>>(params);
  else
    weight_grad_kernel<Product, T, false, tap_major><<<grid, kThreads, bytes, stream>>>(params);
  cuda::check_launch("weight_grad_kernel", __FILE__, __LINE__);
}

// backward_weight on tile T: splits the pixel sum, launches, and adds the
// partial sums to weight_grad. tap_major reads params.x_nhwc.
template <class T, bool tap_major>
void run_weight_grad(const Context& ctx, const ConvProblem& p, WeightGradParams& params, float* weight_grad,
                     Tensor& partial_sums) {
  constexpr int kTileK = T::BK;
  const long long k_size = p.batch * p.out_height * p.out_width;
  const long long m_size = p.out_channels, n_size = p.in_channels * p.kernel * p.kernel;
  const long long tiles = ceil_div(m_size, T::BM) * ceil_div(n_size, T::BN);
  const long long k_tiles = ceil_div(k_size, kTileK);
  // Split the pixel sum so that the blocks fill the GPU once (T::BLOCKS
  // resident per multiprocessor), keeping at least 8 stages of work per block.
  const long long resident = static_cast<long long>(T::BLOCKS) * multiprocessor_count(ctx);
  const long long splits = std::max(1LL, std::min(resident / std::max(tiles, 1LL), k_tiles / 8));
  const long long k_per_split = ceil_div(k_tiles, splits) * kTileK;
  const long long used_splits = ceil_div(k_size, k_per_split);

  float* partial =
      scratch_tensor(partial_sums, {used_splits, m_size * n_size}, DType::f32, ctx.device()).data<float>();
  params.partial = partial;
  params.k_size = k_size;
  params.k_per_split = k_per_split;
  const dim3 grid(static_cast<unsigned>(ceil_div(n_size, T::BN)), static_cast<unsigned>(ceil_div(m_size, T::BM)),
                  static_cast<unsigned>(used_splits));
  const bool vector_a = (p.out_height * p.out_width) % kTileK == 0;
  if (ctx.bf16_products())
    launch_weight_grad<Bf16Product, T, tap_major>(ctx, params, grid, vector_a);
  else
    launch_weight_grad<Tf32Product, T, tap_major>(ctx, params, grid, vector_a);
  accumulate_batch_sum_cuda(ctx, partial, used_splits, m_size * n_size, weight_grad);
}

}  // namespace

void forward(const Context& ctx, const ConvProblem& p, const float* x, const float* weight, const float* bias,
             float* y, Scratch& scratch) {
  if (p.batch == 0) return;
  const bool tap_major = p.in_channels >= kTapMajorChannels;
  const int channel_pad = tap_major ? static_cast<int>(round_up(p.in_channels, NhwcGatherTile::BK)) : 0;
  const int k_size = static_cast<int>(tap_major ? p.kernel * p.kernel * channel_pad
                                                : p.in_channels * p.kernel * p.kernel);
  const int k_stride = static_cast<int>(round_up(k_size, kTapAlign));
  const int m_pad = static_cast<int>(round_up(p.out_channels, gather_tile_rows(tap_major)));

  PackParams pack{};
  pack.weight = weight;
  pack.m_size = static_cast<int>(p.out_channels);
  pack.m_pad = m_pad;
  pack.in_channels = static_cast<int>(p.in_channels);
  pack.kernel = static_cast<int>(p.kernel);
  pack.stride = 1;  // forward taps are consecutive kernel positions
  pack.transpose = false;
  pack.channels = static_cast<int>(p.in_channels);
  pack.channel_pad = channel_pad;
  pack.parts[0] = {k_size, k_stride, static_cast<int>(p.kernel), static_cast<int>(p.kernel), 0, 0, 0};
  const bool in_place = !tap_major && k_stride == k_size && m_pad == p.out_channels &&
                        reinterpret_cast<std::uintptr_t>(weight) % 16 == 0;
  PackParams filled;
  const float* a = pack_weight(ctx, pack, 1, static_cast<long long>(m_pad) * k_stride, in_place,
                               scratch.forward_weight, filled);

  GatherParams params{};
  params.a = a;
  params.source = tap_major ? nhwc_source(ctx, x, p.batch, p.in_channels, p.height, p.width, channel_pad,
                                          scratch.forward_source)
                            : x;
  params.bias = bias;
  params.dest = y;
  params.m_size = static_cast<int>(p.out_channels);
  params.batch = static_cast<int>(p.batch);
  params.source_channels = static_cast<int>(p.in_channels);
  params.source_h = static_cast<int>(p.height);
  params.source_w = static_cast<int>(p.width);
  params.dest_h = static_cast<int>(p.out_height);
  params.dest_w = static_cast<int>(p.out_width);
  params.source_scale = static_cast<int>(p.stride);
  params.dest_scale = 1;
  params.channel_pad = channel_pad;
  GatherPart& part = params.parts[0];
  part.k_size = k_size;
  part.k_stride = k_stride;
  part.taps_h = part.taps_w = static_cast<int>(p.kernel);
  part.tap_step = 1;
  part.grid_h = static_cast<int>(p.out_height);
  part.grid_w = static_cast<int>(p.out_width);
  part.source_row0 = part.source_col0 = static_cast<int>(-p.padding);
  part.dest_row0 = part.dest_col0 = 0;
  part.a_offset = 0;
  params.part_count = 1;
  run_gather(ctx, params, scratch.forward_sums);
}

void backward_data(const Context& ctx, const ConvProblem& p, const float* y, const float* weight,
                   const float* bias, float* x, Scratch& scratch) {
  if (p.batch == 0) return;
  const int s = static_cast<int>(p.stride), k = static_cast<int>(p.kernel), pad = static_cast<int>(p.padding);
  const bool tap_major = p.out_channels >= kTapMajorChannels;
  const int channel_pad = tap_major ? static_cast<int>(round_up(p.out_channels, NhwcGatherTile::BK)) : 0;
  const int m_pad = static_cast<int>(round_up(p.in_channels, gather_tile_rows(tap_major)));

  PackParams pack{};
  pack.weight = weight;
  pack.m_size = static_cast<int>(p.in_channels);
  pack.m_pad = m_pad;
  pack.in_channels = static_cast<int>(p.in_channels);
  pack.kernel = k;
  pack.stride = s;
  pack.transpose = true;
  pack.channels = static_cast<int>(p.out_channels);
  pack.channel_pad = channel_pad;

  GatherParams params{};
  params.bias = bias;
  params.dest = x;
  params.m_size = static_cast<int>(p.in_channels);
  params.batch = static_cast<int>(p.batch);
  params.source_channels = static_cast<int>(p.out_channels);
  params.source_h = static_cast<int>(p.out_height);
  params.source_w = static_cast<int>(p.out_width);
  params.dest_h = static_cast<int>(p.height);
  params.dest_w = static_cast<int>(p.width);
  params.source_scale = 1;
  params.dest_scale = s;
  params.channel_pad = channel_pad;

  // Destination pixel (h, w) = (ph + s*u, pw + s*v) receives the taps
  // i = i0 + s*ti with i0 = (ph + p) mod s, from source row
  // (h + p - i)/s = u + (ph + p - i0)/s - ti; likewise for columns.
  int part_count = 0;
  long long offset = 0;
  for (int ph = 0; ph < s; ++ph)
    for (int pw = 0; pw < s; ++pw) {
      const int grid_h = ph < p.height ? static_cast<int>(ceil_div(p.height - ph, s)) : 0;
      const int grid_w = pw < p.width ? static_cast<int>(ceil_div(p.width - pw, s)) : 0;
      if (grid_h == 0 || grid_w == 0) continue;
      const int i0 = (ph + pad) % s, j0 = (pw + pad) % s;
      const int taps_h = i0 < k ? (k - i0 + s - 1) / s : 0, taps_w = j0 < k ? (k - j0 + s - 1) / s : 0;
      const int k_size = (tap_major ? channel_pad : static_cast<int>(p.out_channels)) * taps_h * taps_w;
      const int k_stride = static_cast<int>(round_up(k_size, kTapAlign));
      GatherPart& part = params.parts[part_count];
      part.k_size = k_size;
      part.k_stride = k_stride;
      part.taps_h = std::max(taps_h, 1);  // a phase without taps has k_size 0; avoid dividing by 0
      part.taps_w = std::max(taps_w, 1);
      part.tap_step = -1;
      part.grid_h = grid_h;
      part.grid_w = grid_w;
      part.source_row0 = (ph + pad - i0) / s;
      part.source_col0 = (pw + pad - j0) / s;
      part.dest_row0 = ph;
      part.dest_col0 = pw;
      part.a_offset = offset;
      pack.parts[part_count] = {k_size, k_stride, part.taps_h, part.taps_w, i0, j0, offset};
      offset += static_cast<long long>(m_pad) * k_stride;
      ++part_count;
    }
  if (part_count == 0) return;
  PackParams filled;
  params.a = pack_weight(ctx, pack, part_count, std::max(offset, 1LL), false, scratch.backward_data_weight, filled);
  params.part_count = part_count;
  params.source = tap_major ? nhwc_source(ctx, y, p.batch, p.out_channels, p.out_height, p.out_width, channel_pad,
                                          scratch.backward_data_source)
                            : y;
  run_gather(ctx, params, scratch.backward_data_sums);
}

void backward_weight(const Context& ctx, const ConvProblem& p, const float* x, const float* y,
                     float* weight_grad, Scratch& scratch) {
  if (p.batch * p.out_height * p.out_width == 0) return;
  WeightGradParams params{};
  params.x = x;
  params.y = y;
  params.in_channels = static_cast<int>(p.in_channels);
  params.height = static_cast<int>(p.height);
  params.width = static_cast<int>(p.width);
  params.out_channels = static_cast<int>(p.out_channels);
  params.out_height = static_cast<int>(p.out_height);
  params.out_width = static_cast<int>(p.out_width);
  params.kernel = static_cast<int>(p.kernel);
  params.stride = static_cast<int>(p.stride);
  params.padding = static_cast<int>(p.padding);
  if (p.in_channels % WeightGradNhwcTile::BN != 0) {
    run_weight_grad<WeightGradTile, false>(ctx, p, params, weight_grad, scratch.weight_sums);
    return;
  }
  // Tap-major: B from an NHWC copy of x, made here on every call (x may differ between calls).
  params.x_nhwc = nhwc_source(ctx, x, p.batch, p.in_channels, p.height, p.width, static_cast<int>(p.in_channels),
                              scratch.weight_source);
  run_weight_grad<WeightGradNhwcTile, true>(ctx, p, params, weight_grad, scratch.weight_sums);
}

}  // namespace plexus::layers::implicit_gemm
