// GDN / IGDN on tensor cores: the fused kernels of gdn.cu with every per-tile
// contraction on mma.sync (f32 storage, f32 accumulation), for f32 tensors
// when the context allows TF32: TF32 m16n8k8 products (cuda::Tf32Product), or
// BF16 m16n8k16 (cuda::Bf16Product) when its precision is bf16, both built
// from the same fragments of the same f32 tiles. Math and notation in gdn.h.
// Under bf16 activation storage (BF16 products, C <= 192; x and dx in one
// dtype, y and dy in one dtype, each side f32 or bf16: Storage below) the
// same kernels read bf16 (widened exactly into the same f32 tiles) and
// write bf16 (rounded to nearest even): the same f32 results, then rounded,
// for half the bytes of each bf16 tensor. Calls with every tensor bf16 and
// a multiple of 8 pixels per image go to gdn_bf16_tiles.cu first.
//
// Layout. A block works on tiles of T consecutive pixels of the batch (a tile
// may span two images) and keeps in shared memory:
//   gamma [R, CP]   its R rows of the effective gamma (R = CP up to C = 192),
//                   rounded to TF32 for the TF32 product, loaded once per block;
//   x     [CP, T]   the tile's inputs as they are: x^2 is formed (and rounded)
//                   while MMA fragments are built, and the epilogues read x
//                   from here, so x and dy come from global memory once
//                   (up to C = 192);
//   q     [CP, T]   (backward) dL/dn of the tile (for the TF32 product as
//                   tf32_operand: rounded once the tensor cores drop the low
//                   bits; the BF16 product rounds operands as it packs them).
// C is padded to CP (32, 64, 128, 192 or 256) with zero gamma and beta 1. The
// per-tile contractions, each a warp-tiled GEMM on m16n8k8 fragments (the
// BF16 product takes two fragment sets, k and k + 8, per m16n8k16 mma):
//   n        = beta + gamma x^2   [R x T],   K = C
//   g        = gamma^T q          [R x T],   K = C   (backward, for dx)
//   dgamma  += q (x^2)^T          [CP x R],  K = T   (backward)
// Every matrix is stored row-major, rows of a multiple of 32 floats, with
// column bits 2-4 XOR-ed by the row (swizzled()): a fragment load reads
// either 8 rows x 4 columns or 4 rows x 8 columns, and both patterns then
// hit 32 distinct banks, so gamma and gamma^T are read from one copy.
// Blocks are persistent and grid-stride over tiles; while a tile is computed
// each thread holds the next tile's x in registers (and this tile's dy is
// loaded before the first contraction), so global latency overlaps the MMAs.
// Up to C = 128 the backward instead copies the next tile's x and dy into a
// second pair of buffers with cp.async, and a tile needs two barriers instead
// of three.
// The backward keeps its dgamma share in registers across all its tiles and
// writes one partial [C*C + C] per block, summed in a fixed order by
// gdn.cu's finishing kernel (deterministic, no atomics).
//
// C = 256 (gamma alone is 256 KiB, more than an SM's shared memory): gamma is
// split into two halves of R = 128 rows (blockIdx.y picks one), still f32
// (bf16 or fp16 halves would lose the mantissa bits or range that the TF32
// product keeps). The forward: each half computes its 128 output channels
// from the whole x tile (the second read of x comes mostly from L2: both
// halves walk the tiles in step). The backward takes two kernels:
// gdn_tensor_core_normalize writes q (into a temporary) and dy f (into dx)
// for its half's channels and sums dbeta; gdn_tensor_core_input_gradient
// then holds the gamma columns of its half [C x 128], reads the whole q tile
// and its half of x, adds 2 x gamma^T q to dx and accumulates dgamma's
// columns of its half. Both write into the same per-block partials.
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "gdn/gdn_cuda.cuh"
#include "plexus/cuda/shared_memory_ops.h"
#include "plexus/cuda/tensor_core_product.h"

namespace plexus::layers::gdn_cuda {

// How a call's activations are stored: In for x and dx, Out for y and dy;
// float, or __nv_bfloat16 (bf16 storage: read widened into the same f32
// tiles, written rounded to nearest even).
template <class InElement, class OutElement>
struct Storage {
  using In = InElement;
  using Out = OutElement;
  static constexpr bool kF32 = std::is_same_v<In, float> && std::is_same_v<Out, float>;
};

// Warp tiling of one padded channel count CP and R = kRows gamma rows per
// block: kThreads threads, tiles of kTile pixels; the [R x T] contractions on
// kContractWarpsM x kContractWarpsN warps, dgamma [CP x R] on
// kGradientWarpsM x kGradientWarpsN; kMinBlocks resident blocks per SM
// (register budget); kBuffers x (and dy) tile buffers in the fused backward;
// the contractions' k loops unrolled kUnroll times. Other tilings can be
// timed against these with lab/bench/gdn_tiling_bench.cu.
template <int CP, int kRows, int kThreads, int kTile, int kContractWarpsM, int kContractWarpsN, int kGradientWarpsM,
          int kGradientWarpsN, int kMinBlocks, int kBuffers, int kUnroll = 2>
struct Tiling {
  static constexpr int channels = CP;
  static constexpr int rows = kRows;
  static constexpr int halves = CP / kRows;  // blocks sharing a tile (gridDim.y)
  static constexpr int threads = kThreads;
  static constexpr int tile = kTile;
  static constexpr int buffers = kBuffers;
  static constexpr int contract_warps_n = kContractWarpsN;
  static constexpr int contract_m_tiles = kRows / (16 * kContractWarpsM);  // 16-row MMA tiles per warp
  static constexpr int contract_n_tiles = kTile / (8 * kContractWarpsN);   // 8-pixel MMA tiles per warp
  static constexpr int gradient_warps_n = kGradientWarpsN;
  static constexpr int gradient_m_tiles = CP / (16 * kGradientWarpsM);
  static constexpr int gradient_n_tiles = kRows / (8 * kGradientWarpsN);
  static constexpr int min_blocks = kMinBlocks;
  // How many k steps of a contraction the compiler unrolls (and may overlap
  // the next step's fragment loads with this step's MMAs).
  static constexpr int contract_unroll = kUnroll;
  // Tile loads: float4 runs of 4 pixels, kTile / 4 per channel row.
  static constexpr int runs_per_row = kTile / 4;
  static constexpr int load_row_step = kThreads / runs_per_row;
  __host__ __device__ static constexpr int loads(int row_count) { return row_count / load_row_step; }
  // gamma rows, beta rows, x buffers (forward and the first split kernel).
  static constexpr std::size_t normalize_bytes = sizeof(float) * (kRows * CP + kRows + kBuffers * CP * kTile);
  // Fused backward (kRows == CP): gamma, beta, x, q and, with two buffers,
  // two x and two dy tiles.
  static constexpr std::size_t backward_bytes = sizeof(float) * (CP * CP + CP + (kBuffers == 2 ? 5 : 2) * CP * kTile);
  // gamma columns [CP x R], q [CP x T] and x [R x T] buffers (second split kernel).
  static constexpr std::size_t input_gradient_bytes = sizeof(float) * (CP * kRows + kBuffers * (CP + kRows) * kTile);
  static_assert(CP % kRows == 0, "row halves");
  static_assert(kContractWarpsM * kContractWarpsN == kThreads / 32, "contraction warps");
  static_assert(kGradientWarpsM * kGradientWarpsN == kThreads / 32, "dgamma warps");
  static_assert(contract_m_tiles * 16 * kContractWarpsM == kRows && contract_n_tiles * 8 * kContractWarpsN == kTile,
                "contraction tiling");
  static_assert(gradient_m_tiles * 16 * kGradientWarpsM == CP && gradient_n_tiles * 8 * kGradientWarpsN == kRows,
                "dgamma tiling");
  static_assert(loads(kRows) * load_row_step == kRows && loads(CP) * load_row_step == CP &&
                    kThreads % runs_per_row == 0,
                "tile loads");
  static_assert(CP % 32 == 0 && kRows % 32 == 0 && kTile % 32 == 0, "swizzled rows are multiples of 32 floats");
  static_assert(kBuffers == 1 || kBuffers == 2, "one or two buffers");
};

// Forward: C <= 128 on 8 warps and 64-pixel tiles, 2 blocks per SM (C = 128:
// 97 KiB of shared memory each, 32x32 warp tiles, k loop fully unrolled:
// faster than unrolled twice). C = 192: gamma alone
// takes 144 KiB, so 32-pixel tiles and one block of 16 warps. C = 256: half
// of gamma (128 KiB) and a 64-pixel x tile (64 KiB), 16 warps.
template <int CP>
struct ForwardTiling;
template <>
struct ForwardTiling<32> : Tiling<32, 32, 256, 64, 2, 4, 2, 4, 2, 1> {};
template <>
struct ForwardTiling<64> : Tiling<64, 64, 256, 64, 2, 4, 2, 4, 2, 1> {};
template <>
struct ForwardTiling<128> : Tiling<128, 128, 256, 64, 4, 2, 4, 2, 2, 1, 16> {};
template <>
struct ForwardTiling<192> : Tiling<192, 192, 512, 32, 4, 4, 4, 4, 1, 1> {};
template <>
struct ForwardTiling<256> : Tiling<256, 128, 512, 64, 4, 4, 4, 4, 1, 1> {};

// Backward: dgamma lives in registers, CP^2 / threads per thread. C <= 64:
// 8 warps, 2 blocks per SM. C = 128 (gamma, two x and dy buffers and q:
// 225 KiB of shared memory, one block per SM): 8 warps with 32x32 warp tiles
// for the contractions and 64x32 for dgamma (64 registers a thread), k loops
// unrolled 8 times: fewer fragment loads and instructions per MMA than 16
// warps of 32x16, and more independent loads in flight per warp (the kernel
// is bound by latency and instruction issue, not by bandwidth). C = 192 (one buffer: 193 KiB): 16 warps, so that dgamma
// takes 72 registers a thread.
template <int CP>
struct BackwardTiling;
template <>
struct BackwardTiling<32> : Tiling<32, 32, 256, 64, 2, 4, 2, 4, 2, 2> {};
template <>
struct BackwardTiling<64> : Tiling<64, 64, 256, 64, 2, 4, 2, 4, 2, 2> {};
template <>
struct BackwardTiling<128> : Tiling<128, 128, 256, 64, 4, 2, 2, 4, 1, 2, 8> {};
template <>
struct BackwardTiling<192> : Tiling<192, 192, 512, 32, 4, 4, 4, 4, 1, 1> {};

// C = 256 backward, in two kernels over the two halves: the first is the
// forward's (ForwardTiling<256>), the second holds the gamma columns of its
// half (128 KiB) and two buffers of a 32-pixel q tile of all channels and x
// of its half (224 KiB), with dgamma [256 x 128] at 64 registers a thread on
// 16 warps.
using InputGradientTiling256 = Tiling<256, 128, 512, 32, 4, 4, 4, 4, 1, 2>;
namespace {

// Offset of element (row, column) of a row-major matrix with rows of
// row_length floats (a multiple of 32): column bits 2-4 XOR (row & 3, row bit 2).
// Rows r0 + 0..7 x columns c0 + 0..3 (A fragments read this way) and rows
// r0 + 0..3 x columns c0 + 0..7 (B fragments) then fall in 32 distinct banks,
// for r0 a multiple of 4 (8 for the first) and c0 a multiple of 4 (8).
__device__ __forceinline__ int swizzled(int row, int column, int row_length) {
  return row * row_length + (column ^ (((row & 3) << 3) | (row & 4)));
}

// swizzled() for the two ways fragments read a matrix, written so that the
// loop variable k0 (a multiple of 8) enters through one XOR or one
// multiply-add per k step, shared by all the step's loads (lane = 4 g + t):
// rows row_g (= g mod 8), columns k0 + t + 4 half:
__device__ __forceinline__ int swizzled_rows_by_g(int row_g, int k0, int half, int row_length) {
  const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  return row_g * row_length + (k0 ^ ((g & 3) << 3)) + ((t + 4 * half) ^ (g & 4));
}
// rows k0 + t + 4 half, columns column_8 + g (column_8 a multiple of 8):
__device__ __forceinline__ int swizzled_rows_by_t(int k0, int half, int column_8, int row_length) {
  const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  return (k0 + t + 4 * half) * row_length + (column_8 ^ (t << 3)) + (g ^ (4 * half));
}

// Round to the nearest TF32 value (10 mantissa bits), as a float.
__device__ __forceinline__ float round_tf32(float v) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return __uint_as_float(r);
}

__device__ __forceinline__ std::uint32_t bits(float v) { return __float_as_uint(v); }

// v as an MMA operand rounded to TF32 like round_tf32 (to nearest, ties away
// from zero), in one integer add: half a TF32 unit in the last place goes
// into the bits and the tensor cores ignore the 13 low mantissa bits of a
// .tf32 operand. For the operands built per fragment in the inner loops
// (finite values), where cvt.rna costs several instructions.
__device__ __forceinline__ std::uint32_t tf32_operand(float v) { return __float_as_uint(v) + 0x1000u; }

// A value as the Product's operand: TF32 rounded to nearest here
// (tf32_operand); BF16 as f32 bits, rounded when the product packs them.
template <class Product>
__device__ __forceinline__ std::uint32_t operand(float v) {
  if constexpr (Product::kGroups == 1) return tf32_operand(v);
  return bits(v);
}

// A value kept in memory for later use as an operand (gamma, q): rounded to
// TF32 for the TF32 product (so the fragments load its bits as they are),
// left as is for the BF16 product.
template <class Product>
__device__ __forceinline__ float stored_operand(float v) {
  if constexpr (Product::kGroups == 1) return round_tf32(v);
  return v;
}

// How far a contraction's k loop steps: 8 per fragment set.
template <class Product>
constexpr int k_step = 8 * Product::kGroups;

// How many of a contraction's k steps the compiler unrolls: the tiling's
// count of m16n8k8 steps (Tiling::contract_unroll) in the Product's steps.
template <class L, class Product>
constexpr int unrolled_steps = L::contract_unroll / Product::kGroups > 0 ? L::contract_unroll / Product::kGroups : 1;

// A contraction's reduction length: channels rounded up to whole k steps
// (at most CP: CP is a multiple of 32; padded channels hold zeros).
template <class Product>
__device__ __forceinline__ int reduce_end_of(int channels) {
  return (channels + k_step<Product> - 1) / k_step<Product> * k_step<Product>;
}

// Effective gamma rows [row_begin, row_begin + kRowCount) x columns
// [column_begin, column_begin + kColumnCount) into gamma_s [kRowCount x
// kColumnCount] (stored_operand, swizzled, 0 outside the C channels).
template <class L, class Product, int kRowCount, int kColumnCount>
__device__ void load_gamma(const float* stored_gamma, int channels, Reparametrization<float> rp, int row_begin,
                           int column_begin, float* gamma_s) {
  for (int e = threadIdx.x; e < kRowCount * kColumnCount; e += L::threads) {
    const int r = e / kColumnCount, c = e % kColumnCount;
    const int i = row_begin + r, j = column_begin + c;
    const float value = i < channels && j < channels
                            ? effective_value(stored_gamma[i * channels + j], rp.gamma_bound, rp.pedestal)
                            : 0.0f;
    gamma_s[swizzled(r, c, kColumnCount)] = stored_operand<Product>(value);
  }
}

// Effective beta of the block's R rows (1 for padded rows, so they never divide by zero).
template <class L>
__device__ void load_beta(const float* stored_beta, int channels, Reparametrization<float> rp, int row_begin,
                          float* beta_s) {
  for (int r = threadIdx.x; r < L::rows; r += L::threads) {
    const int i = row_begin + r;
    beta_s[r] = i < channels ? effective_value(stored_beta[i], rp.beta_bound, rp.pedestal) : 1.0f;
  }
}
// Where a tile starts: its first pixel as (image, pixel within the image),
// one 64-bit division per tile. When images have at least T pixels a tile
// touches at most two images, and tile_run finds its other pixels with a
// compare instead of a division each.
struct TileOrigin {
  long long begin, image, within;
};

__device__ __forceinline__ TileOrigin tile_origin(long long tile_begin, long long pixels) {
  // 32-bit division when both fit (batches below 2^32 pixels): a fraction of
  // the instructions of a 64-bit one, and this runs three times per tile.
  if (tile_begin <= 0xffffffffLL && pixels <= 0xffffffffLL) {
    const auto begin = static_cast<unsigned>(tile_begin), image_pixels = static_cast<unsigned>(pixels);
    return {tile_begin, begin / image_pixels, begin % image_pixels};
  }
  return {tile_begin, tile_begin / pixels, tile_begin % pixels};
}

// pixel_run of the N pixels at column, column + 1, ... of a T-pixel tile.
template <int N, int kTile>
__device__ __forceinline__ PixelRun<N> tile_run(const TileOrigin& origin, int column, long long total_pixels,
                                                long long pixels, int channels, bool vector_io) {
  if (pixels < kTile) return pixel_run<N>(origin.begin + column, total_pixels, pixels, channels, vector_io);
  PixelRun<N> run;
  run.valid_mask = 0;
#pragma unroll
  for (int c = 0; c < N; ++c) {
    long long within = origin.within + column + c;
    long long image = origin.image;
    if (within >= pixels) {
      within -= pixels;
      ++image;
    }
    run.offset[c] = 0;
    if (origin.begin + column + c < total_pixels) {
      run.offset[c] = image * channels * pixels + within;
      run.valid_mask |= 1 << c;
    }
  }
  run.contiguous = vector_io && run.valid_mask == (1 << N) - 1;
  return run;
}

// Rows [row_begin, row_begin + kRowCount) of the tile [tile_begin,
// tile_begin + T) of `source` into registers: thread t reads pixels
// 4 (t % (T/4)) + 0..3 of rows t / (T/4) + k * load_row_step (coalesced
// runs of 4 along pixels: 16 bytes of f32, 8 of bf16); 0 outside the batch
// and the channels. The values stay in the storage's element type
// (store_tile widens them), so a bf16 tile waits in half the registers.
template <class L, int kRowCount, class Element>
__device__ __forceinline__ void fetch_tile(const Element* source, int row_begin, long long tile_begin,
                                           long long total_pixels, long long pixels, int channels, bool vector_io,
                                           Element (&values)[L::loads(kRowCount)][4]) {
  const PixelRun<4> run = tile_run<4, L::tile>(tile_origin(tile_begin, pixels), 4 * (threadIdx.x % L::runs_per_row),
                                               total_pixels, pixels, channels, vector_io);
#pragma unroll
  for (int l = 0; l < L::loads(kRowCount); ++l) {
    const int row = row_begin + threadIdx.x / L::runs_per_row + l * L::load_row_step;
    if (row < channels) {
      load_run<4>(source, run, static_cast<long long>(row) * pixels, values[l]);
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c) values[l][c] = Element(0.0f);
    }
  }
}

// fetch_tile's values into tile_s as f32.
template <class L, int kRowCount, class Element>
__device__ __forceinline__ void store_tile(const Element (&values)[L::loads(kRowCount)][4], float* tile_s) {
#pragma unroll
  for (int l = 0; l < L::loads(kRowCount); ++l) {
    const int row = threadIdx.x / L::runs_per_row + l * L::load_row_step;
    float widened[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) widened[c] = element_value<float>(values[l][c]);
    store4(tile_s + swizzled(row, 4 * (threadIdx.x % L::runs_per_row), L::tile), widened);
  }
}

// fetch_tile + store_tile of rows [row_begin, row_begin + kRowCount) of the
// tile straight into tile_s with cp.async (same thread mapping; 0 outside the
// batch and the channels), as one commit group.
template <class L, int kRowCount>
__device__ __forceinline__ void copy_tile_async(const float* source, int row_begin, long long tile_begin,
                                                long long total_pixels, long long pixels, int channels, bool vector_io,
                                                float* tile_s) {
  const int column = 4 * (threadIdx.x % L::runs_per_row);
  const PixelRun<4> run =
      tile_run<4, L::tile>(tile_origin(tile_begin, pixels), column, total_pixels, pixels, channels, vector_io);
#pragma unroll
  for (int l = 0; l < L::loads(kRowCount); ++l) {
    const int row = threadIdx.x / L::runs_per_row + l * L::load_row_step;
    const int channel = row_begin + row;
    float* destination = tile_s + swizzled(row, column, L::tile);  // 4 consecutive floats (the XOR keeps runs of 4)
    const long long channel_offset = static_cast<long long>(channel) * pixels;
    if (channel < channels && run.contiguous) {
      cuda::copy16_async(destination, source + run.offset[0] + channel_offset);
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const bool valid = channel < channels && ((run.valid_mask >> c) & 1);
        cuda::copy4_async(destination + c, valid ? source + run.offset[c] + channel_offset : source, valid);
      }
    }
  }
  cuda::commit_async();
}

// The three contractions below walk k in steps of k_step<Product>: per
// step, Product::kGroups m16n8k8 fragment sets (set s at k0 + 8 s) of every
// m and n tile, then one Product::multiply per (m tile, n tile).

// acc[mt][nt] += gamma x^2 on the warp's rows m_base + 16 mt + [0, 16) of
// gamma_s [R x CP] and pixels n_base + 8 nt + [0, 8), reduced over channels
// [0, reduce_end). A (m = i, k = j) = gamma_ij, B (k = j, n = p) = x_j(p)^2.
template <class L, class Product>
__device__ __forceinline__ void contract_gamma_x2(const float* gamma_s, const float* x_s, int reduce_end,
                                                  float (&acc)[L::contract_m_tiles][L::contract_n_tiles][4], int m_base,
                                                  int n_base) {
  constexpr int CP = L::channels, G = Product::kGroups, kUnroll = unrolled_steps<L, Product>;
  const int g = (threadIdx.x % 32) / 4;
#pragma unroll kUnroll
  for (int k0 = 0; k0 < reduce_end; k0 += k_step<Product>) {
    std::uint32_t a[L::contract_m_tiles][G][4];
    std::uint32_t b[L::contract_n_tiles][G][2];
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int k = k0 + 8 * s;
#pragma unroll
      for (int mt = 0; mt < L::contract_m_tiles; ++mt) {
        const int r = m_base + 16 * mt + g;
        a[mt][s][0] = bits(gamma_s[swizzled_rows_by_g(r, k, 0, CP)]);
        a[mt][s][1] = bits(gamma_s[swizzled_rows_by_g(r + 8, k, 0, CP)]);
        a[mt][s][2] = bits(gamma_s[swizzled_rows_by_g(r, k, 1, CP)]);
        a[mt][s][3] = bits(gamma_s[swizzled_rows_by_g(r + 8, k, 1, CP)]);
      }
#pragma unroll
      for (int nt = 0; nt < L::contract_n_tiles; ++nt) {
        const int p8 = n_base + 8 * nt;
        const float v0 = x_s[swizzled_rows_by_t(k, 0, p8, L::tile)];
        const float v1 = x_s[swizzled_rows_by_t(k, 1, p8, L::tile)];
        b[nt][s][0] = operand<Product>(v0 * v0);
        b[nt][s][1] = operand<Product>(v1 * v1);
      }
    }
#pragma unroll
    for (int mt = 0; mt < L::contract_m_tiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < L::contract_n_tiles; ++nt) Product::multiply(acc[mt][nt], a[mt], b[nt]);
  }
}

// acc[mt][nt] += gamma^T q on the warp's rows (channels k, columns of
// gamma_s [CP x R]) and pixels, reduced over i in [0, reduce_end).
// A (m = k, k = i) = gamma_ik, B (k = i, n = p) = q_i(p).
template <class L, class Product>
__device__ __forceinline__ void contract_gamma_transposed_q(const float* gamma_s, const float* q_s, int reduce_end,
                                                            float (&acc)[L::contract_m_tiles][L::contract_n_tiles][4],
                                                            int m_base, int n_base) {
  constexpr int R = L::rows, G = Product::kGroups, kUnroll = unrolled_steps<L, Product>;
#pragma unroll kUnroll
  for (int k0 = 0; k0 < reduce_end; k0 += k_step<Product>) {
    std::uint32_t a[L::contract_m_tiles][G][4];
    std::uint32_t b[L::contract_n_tiles][G][2];
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int k = k0 + 8 * s;
#pragma unroll
      for (int mt = 0; mt < L::contract_m_tiles; ++mt) {
        const int r8 = m_base + 16 * mt;
        a[mt][s][0] = bits(gamma_s[swizzled_rows_by_t(k, 0, r8, R)]);
        a[mt][s][1] = bits(gamma_s[swizzled_rows_by_t(k, 0, r8 + 8, R)]);
        a[mt][s][2] = bits(gamma_s[swizzled_rows_by_t(k, 1, r8, R)]);
        a[mt][s][3] = bits(gamma_s[swizzled_rows_by_t(k, 1, r8 + 8, R)]);
      }
#pragma unroll
      for (int nt = 0; nt < L::contract_n_tiles; ++nt) {
        const int p8 = n_base + 8 * nt;
        b[nt][s][0] = bits(q_s[swizzled_rows_by_t(k, 0, p8, L::tile)]);
        b[nt][s][1] = bits(q_s[swizzled_rows_by_t(k, 1, p8, L::tile)]);
      }
    }
#pragma unroll
    for (int mt = 0; mt < L::contract_m_tiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < L::contract_n_tiles; ++nt) Product::multiply(acc[mt][nt], a[mt], b[nt]);
  }
}

// acc[mt][nt] += q (x^2)^T over the tile's T pixels on the warp's dgamma rows
// i = m_base + 16 mt + [0, 16) (rows of q_s [CP x T]) and columns
// k = n_base + 8 nt + [0, 8) (rows of x_s [R x T]).
// A (m = i, k = p) = q_i(p), B (k = p, n = k) = x_k(p)^2.
template <class L, class Product>
__device__ __forceinline__ void accumulate_q_x2(const float* q_s, const float* x_s,
                                                float (&acc)[L::gradient_m_tiles][L::gradient_n_tiles][4], int m_base,
                                                int n_base) {
  constexpr int G = Product::kGroups, kUnroll = unrolled_steps<L, Product>;
  const int g = (threadIdx.x % 32) / 4;
#pragma unroll kUnroll
  for (int p0 = 0; p0 < L::tile; p0 += k_step<Product>) {
    std::uint32_t a[L::gradient_m_tiles][G][4];
    std::uint32_t b[L::gradient_n_tiles][G][2];
#pragma unroll
    for (int s = 0; s < G; ++s) {
      const int p = p0 + 8 * s;
#pragma unroll
      for (int mt = 0; mt < L::gradient_m_tiles; ++mt) {
        const int r = m_base + 16 * mt + g;
        a[mt][s][0] = bits(q_s[swizzled_rows_by_g(r, p, 0, L::tile)]);
        a[mt][s][1] = bits(q_s[swizzled_rows_by_g(r + 8, p, 0, L::tile)]);
        a[mt][s][2] = bits(q_s[swizzled_rows_by_g(r, p, 1, L::tile)]);
        a[mt][s][3] = bits(q_s[swizzled_rows_by_g(r + 8, p, 1, L::tile)]);
      }
#pragma unroll
      for (int nt = 0; nt < L::gradient_n_tiles; ++nt) {
        const int k = n_base + 8 * nt + g;
        const float v0 = x_s[swizzled_rows_by_g(k, p, 0, L::tile)];
        const float v1 = x_s[swizzled_rows_by_g(k, p, 1, L::tile)];
        b[nt][s][0] = operand<Product>(v0 * v0);
        b[nt][s][1] = operand<Product>(v1 * v1);
      }
    }
#pragma unroll
    for (int mt = 0; mt < L::gradient_m_tiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < L::gradient_n_tiles; ++nt) Product::multiply(acc[mt][nt], a[mt], b[nt]);
  }
}

// The two pixels of accumulator columns 2t, 2t + 1 of each of the warp's n tiles.
template <class L>
__device__ __forceinline__ void pixel_pairs(long long tile_begin, int n_base, long long total_pixels, long long pixels,
                                            int channels, bool vector_io, PixelRun<2> (&runs)[L::contract_n_tiles]) {
  const int t = threadIdx.x % 4;
  const TileOrigin origin = tile_origin(tile_begin, pixels);
#pragma unroll
  for (int nt = 0; nt < L::contract_n_tiles; ++nt)
    runs[nt] = tile_run<2, L::tile>(origin, n_base + 8 * nt + 2 * t, total_pixels, pixels, channels, vector_io);
}

// values = channels row_begin + m_base + 16 mt + g + 8 half of `source` at
// the pixels of runs[nt], in the accumulator layout (0 beyond the C channels).
template <class L, class Element>
__device__ __forceinline__ void load_rows(const Element* source, const PixelRun<2> (&runs)[L::contract_n_tiles],
                                          int row_begin, int m_base, int channels, long long pixels,
                                          float (&values)[L::contract_m_tiles][L::contract_n_tiles][4]) {
  const int g = (threadIdx.x % 32) / 4;
#pragma unroll
  for (int mt = 0; mt < L::contract_m_tiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row_begin + m_base + 16 * mt + g + 8 * half;
#pragma unroll
      for (int nt = 0; nt < L::contract_n_tiles; ++nt) {
        if (row < channels) {
          load_run<2>(source, runs[nt], static_cast<long long>(row) * pixels, values[mt][nt] + 2 * half);
        } else {
          values[mt][nt][2 * half] = values[mt][nt][2 * half + 1] = 0.0f;
        }
      }
    }
}

// Forward (kGradient false): per pixel n_i = beta_i + sum_j gamma_ij x_j^2
// (Product's products, f32 sums), GDN y_i = x_i n_i^-1/2, IGDN
// y_i = x_i n_i^1/2, into `out`. With kGradient (the first backward kernel at
// C = 256): q_i = dL/dn_i (norm_gradient, as stored_operand) into q, dy_i f_i into `out`
// (when not null), and the block's dbeta into its partial [C*C + C].
// Launch: persistent blocks grid-striding over T-pixel tiles; blockIdx.y
// picks the block's R rows of gamma (all of them up to C = 192), which stay
// in shared memory for all its tiles. S (Storage): how x and out are
// stored (the forward only; the split backward's are f32).
template <class L, class Product, bool kInverse, bool kGradient, class S = Storage<float, float>>
__global__ void __launch_bounds__(L::threads, L::min_blocks)
    gdn_tensor_core_normalize(const typename S::In* x, const float* dy, typename S::Out* out, float* q,
                              const float* stored_beta, const float* stored_gamma, int channels, long long pixels,
                              long long total_pixels, Reparametrization<float> rp, bool vector_io, float* partials) {
  static_assert(!kGradient || S::kF32, "the split backward stores f32");
  constexpr int CP = L::channels, MT = L::contract_m_tiles, NT = L::contract_n_tiles;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  float* gamma_s = reinterpret_cast<float*>(shared_bytes);
  float* beta_s = gamma_s + L::rows * CP;
  float* x_buffers = beta_s + L::rows;
  const int row_begin = blockIdx.y * L::rows;
  load_gamma<L, Product, L::rows, CP>(stored_gamma, channels, rp, row_begin, 0, gamma_s);
  load_beta<L>(stored_beta, channels, rp, row_begin, beta_s);

  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  const int m_base = (warp / L::contract_warps_n) * MT * 16;
  const int n_base = (warp % L::contract_warps_n) * NT * 8;
  const int reduce_end = reduce_end_of<Product>(channels);
  const long long tiles = (total_pixels + L::tile - 1) / L::tile;
  float beta_grad[MT][2] = {};
  typename S::In next[L::loads(CP)][4];
  if (blockIdx.x < tiles)
    fetch_tile<L, CP>(x, 0, blockIdx.x * L::tile, total_pixels, pixels, channels, vector_io, next);
  int buffer = 0;
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const long long tile_begin = tile * L::tile;
    float* x_s = x_buffers + buffer * CP * L::tile;
    if (L::buffers == 1) __syncthreads();  // the previous tile's x_s is no longer read
    store_tile<L, CP>(next, x_s);
    // The backward issues its dy loads before the contraction, which hides
    // their latency; the forward finds its pixels after it (fewer live registers).
    PixelRun<2> runs[NT];
    float dyv[MT][NT][4];
    if (kGradient) {
      pixel_pairs<L>(tile_begin, n_base, total_pixels, pixels, channels, vector_io, runs);
      load_rows<L>(dy, runs, row_begin, m_base, channels, pixels, dyv);
    }
    __syncthreads();  // x_s stored (and the parameters, the first time)
    if (tile + gridDim.x < tiles)
      fetch_tile<L, CP>(x, 0, (tile + gridDim.x) * L::tile, total_pixels, pixels, channels, vector_io, next);

    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = beta_s[m_base + 16 * mt + g + 8 * (e / 2)];
    contract_gamma_x2<L, Product>(gamma_s, x_s, reduce_end, acc, m_base, n_base);
    if (!kGradient) pixel_pairs<L>(tile_begin, n_base, total_pixels, pixels, channels, vector_io, runs);

#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row_begin + m_base + 16 * mt + g + 8 * half;
        if (row >= channels) continue;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const float2 xv = *reinterpret_cast<const float2*>(x_s + swizzled(row, n_base + 8 * nt + 2 * t, L::tile));
          const float* n = acc[mt][nt] + 2 * half;
          const long long channel_offset = static_cast<long long>(row) * pixels;
          if (kGradient) {
            float* d = dyv[mt][nt] + 2 * half;
            const float qv[2] = {norm_gradient<kInverse>(n[0], xv.x, d[0]), norm_gradient<kInverse>(n[1], xv.y, d[1])};
            beta_grad[mt][half] += qv[0] + qv[1];
            const float rounded[2] = {stored_operand<Product>(qv[0]), stored_operand<Product>(qv[1])};
            store_run<2>(q, runs[nt], channel_offset, rounded);
            if (out) store_run<2>(out, runs[nt], channel_offset, d);
          } else {
            const float y[2] = {kInverse ? xv.x * sqrtf(n[0]) : xv.x * rsqrtf(n[0]),
                                kInverse ? xv.y * sqrtf(n[1]) : xv.y * rsqrtf(n[1])};
            store_run<2>(out, runs[nt], channel_offset, y);
          }
        }
      }
    if (L::buffers == 2) buffer ^= 1;
  }
  if (kGradient)
    write_beta_partial<MT, L::contract_warps_n, L::rows, L::threads>(
        beta_grad, m_base, row_begin, channels, x_buffers,
        partials + static_cast<long long>(blockIdx.x) * (channels * channels + channels));
}

// Fused backward (C <= 192, all of gamma in one block), per tile (sums over
// the tile's pixels):
//   n = beta + gamma x^2 (recomputed), q_i = dL/dn_i (norm_gradient),
//   dx_k = dy_k f_k + 2 x_k sum_i gamma_ik q_i   (f = n^-1/2 GDN, n^1/2 IGDN)
//   dbeta_i += sum q_i,  dgamma_ik += sum q_i x_k^2
// then one [C*C + C] partial per block: dgamma row-major, then dbeta.
// Launch: persistent blocks over T-pixel tiles (1 per SM at C >= 128);
// dgamma stays in registers (MMA accumulators) across the block's tiles.
// Two buffers (C <= 128): x and dy of the next tile are copied into the
// other buffers with cp.async while this tile is computed, and each tile
// passes two barriers (the first one also frees q_s and the other buffers:
// every warp has finished the previous tile). One buffer (C = 192): the next
// tile's x waits in registers, dy is loaded into registers, three barriers.
// S (Storage): how x and dx (S::In) and dy (S::Out) are stored. cp.async
// copies bits, so with two buffers and any bf16 tile, the tiles come through
// registers instead: loaded after the first barrier, held (as stored) while
// this tile is computed, and stored widened into the other buffers at its end.
template <class L, class Product, bool kInverse, class S = Storage<float, float>>
__global__ void __launch_bounds__(L::threads, L::min_blocks)
    gdn_tensor_core_backward(const typename S::In* x, const typename S::Out* dy, typename S::In* dx,
                             const float* stored_beta, const float* stored_gamma, int channels, long long pixels,
                             long long total_pixels, Reparametrization<float> rp, bool vector_io, float* partials) {
  static_assert(L::rows == L::channels, "all of gamma in one block");
  constexpr int CP = L::channels, MT = L::contract_m_tiles, NT = L::contract_n_tiles;
  constexpr int GMT = L::gradient_m_tiles, GNT = L::gradient_n_tiles;
  constexpr bool kAsync = L::buffers == 2;
  constexpr bool kCopyAsync = kAsync && S::kF32;
  constexpr int kTileFloats = CP * L::tile;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  float* gamma_s = reinterpret_cast<float*>(shared_bytes);
  float* beta_s = gamma_s + CP * CP;
  float* x_buffers = beta_s + CP;                            // [buffers][CP x T]
  float* dy_buffers = x_buffers + L::buffers * kTileFloats;  // [2][CP x T], with two buffers
  float* q_s = kAsync ? dy_buffers + 2 * kTileFloats : dy_buffers;
  load_gamma<L, Product, CP, CP>(stored_gamma, channels, rp, 0, 0, gamma_s);
  load_beta<L>(stored_beta, channels, rp, 0, beta_s);

  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  const int m_base = (warp / L::contract_warps_n) * MT * 16;
  const int n_base = (warp % L::contract_warps_n) * NT * 8;
  const int gradient_m_base = (warp / L::gradient_warps_n) * GMT * 16;
  const int gradient_n_base = (warp % L::gradient_warps_n) * GNT * 8;
  const int reduce_end = reduce_end_of<Product>(channels);
  const long long tiles = (total_pixels + L::tile - 1) / L::tile;

  float gamma_grad[GMT][GNT][4] = {};
  float beta_grad[MT][2] = {};
  typename S::In next[kCopyAsync ? 1 : L::loads(CP)][4];                 // x of the next tile
  typename S::Out next_dy[kAsync && !kCopyAsync ? L::loads(CP) : 1][4];  // dy of the next tile (bf16, two buffers)
  if (blockIdx.x < tiles) {
    const long long first = blockIdx.x * L::tile;
    if constexpr (kCopyAsync) {
      copy_tile_async<L, CP>(x, 0, first, total_pixels, pixels, channels, vector_io, x_buffers);
      copy_tile_async<L, CP>(dy, 0, first, total_pixels, pixels, channels, vector_io, dy_buffers);
    } else if constexpr (kAsync) {
      fetch_tile<L, CP>(x, 0, first, total_pixels, pixels, channels, vector_io, next);
      fetch_tile<L, CP>(dy, 0, first, total_pixels, pixels, channels, vector_io, next_dy);
      store_tile<L, CP>(next, x_buffers);
      store_tile<L, CP>(next_dy, dy_buffers);
    } else {
      fetch_tile<L, CP>(x, 0, first, total_pixels, pixels, channels, vector_io, next);
    }
  }
  int buffer = 0;
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const long long tile_begin = tile * L::tile;
    const bool has_next = tile + gridDim.x < tiles;
    float* x_s = x_buffers + buffer * kTileFloats;
    const float* dy_s = dy_buffers + buffer * kTileFloats;
    PixelRun<2> runs[NT];
    float dyv[MT][NT][4];  // dy, then dy f (kept for dx)
    if constexpr (kAsync) {
      pixel_pairs<L>(tile_begin, n_base, total_pixels, pixels, channels, vector_io, runs);
      if constexpr (kCopyAsync) cuda::wait_async<0>();
      __syncthreads();  // this tile's x and dy have landed; the previous tile is done everywhere
      if (has_next) {
        const long long next_begin = (tile + gridDim.x) * L::tile;
        if constexpr (kCopyAsync) {
          copy_tile_async<L, CP>(x, 0, next_begin, total_pixels, pixels, channels, vector_io,
                                 x_buffers + (buffer ^ 1) * kTileFloats);
          copy_tile_async<L, CP>(dy, 0, next_begin, total_pixels, pixels, channels, vector_io,
                                 dy_buffers + (buffer ^ 1) * kTileFloats);
        } else {
          fetch_tile<L, CP>(x, 0, next_begin, total_pixels, pixels, channels, vector_io, next);
          fetch_tile<L, CP>(dy, 0, next_begin, total_pixels, pixels, channels, vector_io, next_dy);
        }
      }
    } else {
      __syncthreads();  // the previous tile's x_s and q_s are no longer read
      store_tile<L, CP>(next, x_s);
      // dy in the accumulator layout, issued before the contraction that hides its latency.
      pixel_pairs<L>(tile_begin, n_base, total_pixels, pixels, channels, vector_io, runs);
      load_rows<L>(dy, runs, 0, m_base, channels, pixels, dyv);
      __syncthreads();
      if (has_next)
        fetch_tile<L, CP>(x, 0, (tile + gridDim.x) * L::tile, total_pixels, pixels, channels, vector_io, next);
    }

    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = beta_s[m_base + 16 * mt + g + 8 * (e / 2)];
    contract_gamma_x2<L, Product>(gamma_s, x_s, reduce_end, acc, m_base, n_base);

    // q into q_s (as operand<Product>; 0 for padded channels and pixels, where x = dy = 0);
    // dyv becomes dy f, kept for dx.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = m_base + 16 * mt + g + 8 * half;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int column = n_base + 8 * nt + 2 * t;
          const float2 xv = *reinterpret_cast<const float2*>(x_s + swizzled(row, column, L::tile));
          float* d = dyv[mt][nt] + 2 * half;
          if constexpr (kAsync) {
            const float2 dv = *reinterpret_cast<const float2*>(dy_s + swizzled(row, column, L::tile));
            d[0] = dv.x;
            d[1] = dv.y;
          }
          const float* n = acc[mt][nt] + 2 * half;
          const float qv[2] = {norm_gradient<kInverse>(n[0], xv.x, d[0]), norm_gradient<kInverse>(n[1], xv.y, d[1])};
          beta_grad[mt][half] += qv[0] + qv[1];
          *reinterpret_cast<float2*>(q_s + swizzled(row, column, L::tile)) =
              make_float2(__uint_as_float(operand<Product>(qv[0])), __uint_as_float(operand<Product>(qv[1])));
        }
      }
    __syncthreads();

    if (dx) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
      contract_gamma_transposed_q<L, Product>(gamma_s, q_s, reduce_end, acc, m_base, n_base);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = m_base + 16 * mt + g + 8 * half;
          if (row >= channels) continue;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const float2 xv = *reinterpret_cast<const float2*>(x_s + swizzled(row, n_base + 8 * nt + 2 * t, L::tile));
            const float* back = acc[mt][nt] + 2 * half;
            const float* scaled = dyv[mt][nt] + 2 * half;
            const float out[2] = {scaled[0] + 2.0f * xv.x * back[0], scaled[1] + 2.0f * xv.y * back[1]};
            store_run<2>(dx, runs[nt], static_cast<long long>(row) * pixels, out);
          }
        }
    }
    accumulate_q_x2<L, Product>(q_s, x_s, gamma_grad, gradient_m_base, gradient_n_base);
    if constexpr (kAsync && !kCopyAsync) {
      // The other buffers were last read in the previous tile, which every
      // warp finished before this tile's first barrier.
      if (has_next) {
        store_tile<L, CP>(next, x_buffers + (buffer ^ 1) * kTileFloats);
        store_tile<L, CP>(next_dy, dy_buffers + (buffer ^ 1) * kTileFloats);
      }
    }
    if (kAsync) buffer ^= 1;
  }

  float* partial = partials + static_cast<long long>(blockIdx.x) * (channels * channels + channels);
  write_beta_partial<MT, L::contract_warps_n, L::rows, L::threads>(beta_grad, m_base, 0, channels, q_s, partial);
  write_gamma_partial(gamma_grad, gradient_m_base, gradient_n_base, channels, partial);
}

// Second backward kernel at C = 256, for the channels k of its half
// (blockIdx.y), after gdn_tensor_core_normalize<..., true> wrote q and dy f:
//   dx_k = (dy f)_k + 2 x_k sum_i gamma_ik q_i    (dx holds dy f; skipped when null)
//   dgamma_ik += sum over the tile of q_i x_k^2   (all i)
// then dgamma's columns of its half into the block's partial.
// Launch: persistent blocks grid-striding over T-pixel tiles, as many per
// half as the first kernel (they fill the same partials). The next tile's q
// and x are copied into a second pair of buffers with cp.async while this
// one is computed: one barrier per tile.
template <class L, class Product>
__global__ void __launch_bounds__(L::threads, L::min_blocks)
    gdn_tensor_core_input_gradient(const float* x, const float* q, float* dx, const float* stored_gamma, int channels,
                                   long long pixels, long long total_pixels, Reparametrization<float> rp,
                                   bool vector_io, float* partials) {
  constexpr int CP = L::channels, R = L::rows, MT = L::contract_m_tiles, NT = L::contract_n_tiles;
  constexpr int GMT = L::gradient_m_tiles, GNT = L::gradient_n_tiles;
  static_assert(L::buffers == 2, "double-buffered");
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  float* gamma_s = reinterpret_cast<float*>(shared_bytes);  // [CP x R]: gamma_s(i, k) = gamma(i, row_begin + k)
  float* q_buffers = gamma_s + CP * R;                      // [2][CP x T]
  float* x_buffers = q_buffers + 2 * CP * L::tile;          // [2][R x T]: channels row_begin + [0, R)
  const int row_begin = blockIdx.y * R;
  load_gamma<L, Product, CP, R>(stored_gamma, channels, rp, 0, row_begin, gamma_s);

  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  const int m_base = (warp / L::contract_warps_n) * MT * 16;
  const int n_base = (warp % L::contract_warps_n) * NT * 8;
  const int gradient_m_base = (warp / L::gradient_warps_n) * GMT * 16;
  const int gradient_n_base = (warp % L::gradient_warps_n) * GNT * 8;
  const int reduce_end = reduce_end_of<Product>(channels);
  const long long tiles = (total_pixels + L::tile - 1) / L::tile;

  float gamma_grad[GMT][GNT][4] = {};
  if (blockIdx.x < tiles) {
    copy_tile_async<L, CP>(q, 0, blockIdx.x * L::tile, total_pixels, pixels, channels, vector_io, q_buffers);
    copy_tile_async<L, R>(x, row_begin, blockIdx.x * L::tile, total_pixels, pixels, channels, vector_io, x_buffers);
  }
  int buffer = 0;
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const long long tile_begin = tile * L::tile;
    const float* q_s = q_buffers + buffer * CP * L::tile;
    const float* x_s = x_buffers + buffer * R * L::tile;
    PixelRun<2> runs[NT];
    pixel_pairs<L>(tile_begin, n_base, total_pixels, pixels, channels, vector_io, runs);
    float scaled[MT][NT][4];
    if (dx) load_rows<L>(dx, runs, row_begin, m_base, channels, pixels, scaled);
    cuda::wait_async<0>();
    __syncthreads();  // this tile's q and x have landed (and gamma_s); the previous tile is done everywhere
    if (tile + gridDim.x < tiles) {
      const long long next_begin = (tile + gridDim.x) * L::tile;
      copy_tile_async<L, CP>(q, 0, next_begin, total_pixels, pixels, channels, vector_io,
                             q_buffers + (buffer ^ 1) * CP * L::tile);
      copy_tile_async<L, R>(x, row_begin, next_begin, total_pixels, pixels, channels, vector_io,
                            x_buffers + (buffer ^ 1) * R * L::tile);
    }

    if (dx) {
      float acc[MT][NT][4] = {};
      contract_gamma_transposed_q<L, Product>(gamma_s, q_s, reduce_end, acc, m_base, n_base);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int local = m_base + 16 * mt + g + 8 * half;
          if (row_begin + local >= channels) continue;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const float2 xv = *reinterpret_cast<const float2*>(x_s + swizzled(local, n_base + 8 * nt + 2 * t, L::tile));
            const float* back = acc[mt][nt] + 2 * half;
            const float* d = scaled[mt][nt] + 2 * half;
            const float out[2] = {d[0] + 2.0f * xv.x * back[0], d[1] + 2.0f * xv.y * back[1]};
            store_run<2>(dx, runs[nt], static_cast<long long>(row_begin + local) * pixels, out);
          }
        }
    }
    accumulate_q_x2<L, Product>(q_s, x_s, gamma_grad, gradient_m_base, gradient_n_base);
    buffer ^= 1;
  }

  float* partial = partials + static_cast<long long>(blockIdx.x) * (channels * channels + channels);
  write_gamma_partial(gamma_grad, gradient_m_base, row_begin + gradient_n_base, channels, partial);
}

// C padded for the tensor-core kernels, or 0 when C is too large for them.
int padded_channels(int channels) {
  if (channels <= 32) return 32;
  if (channels <= 64) return 64;
  if (channels <= 128) return 128;
  if (channels <= 192) return 192;
  if (channels <= 256) return 256;
  return 0;
}

// mma.sync with TF32 or BF16 operands needs compute capability 8.0. Queried once
// per device, so that later calls (a CUDA graph capture among them) only ask
// for the current device.
bool device_has_mma_sync() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices];  // 0: not yet known, 1: no, 2: yes
  int device = 0;
  cuda::check_cuda(cudaGetDevice(&device), "cudaGetDevice", __FILE__, __LINE__);
  if (device < kMaxDevices && cached[device].load() > 0) return cached[device].load() == 2;
  int major = 0;
  cuda::check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                   "cudaDeviceGetAttribute(ComputeCapabilityMajor)", __FILE__, __LINE__);
  if (device < kMaxDevices) cached[device].store(major >= 8 ? 2 : 1);
  return major >= 8;
}

// Blocks per row half (gridDim.x) of a persistent kernel run on
// `halves` x gridDim.x blocks: as many as are resident at once, at least
// one, at most one per tile. `resident` = 0 (it cannot run here) gives 0.
int blocks_per_half(int resident, int halves, long long tiles) {
  if (resident == 0) return 0;
  const long long blocks = resident / halves > 0 ? resident / halves : 1;
  return static_cast<int>(blocks < tiles ? blocks : tiles);
}

template <int CP, bool kInverse, class Product, class S>
bool launch_forward(Context& ctx, const Tensor& x, Tensor& y, const Tensor& beta, const Tensor& gamma,
                    const Problem& problem, Reparametrization<float> rp) {
  using L = ForwardTiling<CP>;
  constexpr auto kernel = gdn_tensor_core_normalize<L, Product, kInverse, false, S>;
  const long long tiles = (problem.total_pixels + L::tile - 1) / L::tile;
  const int blocks = blocks_per_half(resident_blocks<kernel>(L::threads, L::normalize_bytes), L::halves, tiles);
  if (blocks == 0) return false;
  const bool vector_io = problem.pixels % 4 == 0 && aligned16(x.raw_data()) && aligned16(y.raw_data());
  kernel<<<dim3(blocks, L::halves), L::threads, L::normalize_bytes, cuda::stream(ctx)>>>(
      elements<typename S::In>(x), nullptr, elements<typename S::Out>(y), nullptr, beta.data<float>(),
      gamma.data<float>(), problem.channels, problem.pixels, problem.total_pixels, rp, vector_io, nullptr);
  cuda::check_launch("gdn_tensor_core_normalize", __FILE__, __LINE__);
  return true;
}

template <int CP, bool kInverse, class Product, class S>
Tensor launch_backward(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, const Tensor& beta,
                       const Tensor& gamma, const Problem& problem, Reparametrization<float> rp,
                       Tensor& partials_cache) {
  using L = BackwardTiling<CP>;
  constexpr auto kernel = gdn_tensor_core_backward<L, Product, kInverse, S>;
  const long long tiles = (problem.total_pixels + L::tile - 1) / L::tile;
  const int blocks = persistent_blocks<kernel>(L::threads, L::backward_bytes, tiles);
  if (blocks == 0) return Tensor();
  Tensor& partials = partials_for(partials_cache, blocks, problem, x.device());
  const bool vector_io = problem.pixels % 4 == 0 && aligned16(x.raw_data()) && aligned16(dy.raw_data()) &&
                         (!dx || aligned16(dx->raw_data()));
  kernel<<<blocks, L::threads, L::backward_bytes, cuda::stream(ctx)>>>(
      elements<typename S::In>(x), elements<typename S::Out>(dy), dx ? elements<typename S::In>(*dx) : nullptr,
      beta.data<float>(), gamma.data<float>(), problem.channels, problem.pixels, problem.total_pixels, rp, vector_io,
      partials.data<float>());
  cuda::check_launch("gdn_tensor_core_backward", __FILE__, __LINE__);
  return partials;
}

// C = 256: gdn_tensor_core_normalize writes q (a temporary) and dy f (into dx) and
// dbeta; gdn_tensor_core_input_gradient finishes dx and adds dgamma, into the same
// partials (both kernels on the same number of blocks per half).
template <bool kInverse, class Product>
Tensor launch_split_backward(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, const Tensor& beta,
                             const Tensor& gamma, const Problem& problem, Reparametrization<float> rp,
                             Tensor& partials_cache) {
  using First = ForwardTiling<256>;
  using Second = InputGradientTiling256;
  const long long first_tiles = (problem.total_pixels + First::tile - 1) / First::tile;
  const int first_resident = resident_blocks<gdn_tensor_core_normalize<First, Product, kInverse, true>>(
      First::threads, First::normalize_bytes);
  const int second_resident =
      resident_blocks<gdn_tensor_core_input_gradient<Second, Product>>(Second::threads, Second::input_gradient_bytes);
  const int blocks = blocks_per_half(first_resident < second_resident ? first_resident : second_resident, First::halves,
                                     first_tiles);  // first_tiles <= the second kernel's tiles
  if (blocks == 0) return Tensor();
  Tensor& partials = partials_for(partials_cache, blocks, problem, x.device());
  Tensor q(x.shape(), DType::f32, x.device());
  float* dx_data = dx ? dx->data<float>() : nullptr;
  const bool vector_io = problem.pixels % 4 == 0 && aligned16(x.data<float>()) && aligned16(dy.data<float>()) &&
                         aligned16(q.data<float>()) && (!dx || aligned16(dx_data));
  gdn_tensor_core_normalize<First, Product, kInverse, true>
      <<<dim3(blocks, First::halves), First::threads, First::normalize_bytes, cuda::stream(ctx)>>>(
          x.data<float>(), dy.data<float>(), dx_data, q.data<float>(), beta.data<float>(), gamma.data<float>(),
          problem.channels, problem.pixels, problem.total_pixels, rp, vector_io, partials.data<float>());
  cuda::check_launch("gdn_tensor_core_normalize (backward)", __FILE__, __LINE__);
  gdn_tensor_core_input_gradient<Second, Product>
      <<<dim3(blocks, Second::halves), Second::threads, Second::input_gradient_bytes, cuda::stream(ctx)>>>(
          x.data<float>(), q.data<float>(), dx_data, gamma.data<float>(), problem.channels, problem.pixels,
          problem.total_pixels, rp, vector_io, partials.data<float>());
  cuda::check_launch("gdn_tensor_core_input_gradient", __FILE__, __LINE__);
  return partials;
}

// S: f32 storage, or bf16 storage on either side (BF16 products, C <= 192:
// the C = 256 backward stores dy f in dx between its two kernels, which
// bf16 would round).
template <bool kInverse, class Product, class S>
bool forward_padded(Context& ctx, const Tensor& x, Tensor& y, const Tensor& beta, const Tensor& gamma,
                    const Problem& problem, Reparametrization<float> rp) {
  switch (padded_channels(problem.channels)) {
    case 32:
      return launch_forward<32, kInverse, Product, S>(ctx, x, y, beta, gamma, problem, rp);
    case 64:
      return launch_forward<64, kInverse, Product, S>(ctx, x, y, beta, gamma, problem, rp);
    case 128:
      return launch_forward<128, kInverse, Product, S>(ctx, x, y, beta, gamma, problem, rp);
    case 192:
      return launch_forward<192, kInverse, Product, S>(ctx, x, y, beta, gamma, problem, rp);
    case 256:
      if constexpr (S::kF32) return launch_forward<256, kInverse, Product, S>(ctx, x, y, beta, gamma, problem, rp);
      return false;
    default:
      return false;
  }
}

template <bool kInverse, class Product, class S>
Tensor backward_padded(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, const Tensor& beta,
                       const Tensor& gamma, const Problem& problem, Reparametrization<float> rp, Tensor& partials) {
  switch (padded_channels(problem.channels)) {
    case 32:
      return launch_backward<32, kInverse, Product, S>(ctx, x, dy, dx, beta, gamma, problem, rp, partials);
    case 64:
      return launch_backward<64, kInverse, Product, S>(ctx, x, dy, dx, beta, gamma, problem, rp, partials);
    case 128:
      return launch_backward<128, kInverse, Product, S>(ctx, x, dy, dx, beta, gamma, problem, rp, partials);
    case 192:
      return launch_backward<192, kInverse, Product, S>(ctx, x, dy, dx, beta, gamma, problem, rp, partials);
    case 256:
      if constexpr (S::kF32)
        return launch_split_backward<kInverse, Product>(ctx, x, dy, dx, beta, gamma, problem, rp, partials);
      return Tensor();
    default:
      return Tensor();
  }
}

// Calls fn(Storage<In, Out>{}) for the dtypes of a call's input side (x,
// dx) and output side (y, dy): f32 alone for TF32 products; f32 or bf16 on
// each side for BF16 products. Returns fallback for any other combination
// (then the f32 kernels run on stand-ins).
template <class Result, class Fn>
Result with_storage(bool bf16_products, DType in, DType out, Result fallback, Fn&& fn) {
  const auto supported = [](DType dtype) { return dtype == DType::f32 || dtype == DType::bf16; };
  if (!supported(in) || !supported(out)) return fallback;
  if (in == DType::f32 && out == DType::f32) return fn(Storage<float, float>{});
  if (!bf16_products) return fallback;
  if (in == DType::bf16 && out == DType::bf16) return fn(Storage<__nv_bfloat16, __nv_bfloat16>{});
  if (in == DType::bf16) return fn(Storage<__nv_bfloat16, float>{});
  return fn(Storage<float, __nv_bfloat16>{});
}

// Whether the contractions run as BF16 products: at bf16 precision, unless
// KernelSettings::gdn_bf16 is off (TF32 products, to compare).
bool bf16_products(const Context& ctx) { return ctx.kernel_settings().gdn_bf16 && ctx.bf16_products(); }

}  // namespace

bool tensor_core_forward(Context& ctx, const Tensor& x, Tensor& y, const Tensor& stored_beta,
                         const Tensor& stored_gamma, const Problem& problem, Reparametrization<float> rp,
                         bool inverse) {
  if (padded_channels(problem.channels) == 0 || !device_has_mma_sync()) return false;
  const bool bf16 = bf16_products(ctx);
  if (bf16 && bf16_tile_forward(ctx, x, y, stored_beta, stored_gamma, problem, rp, inverse)) return true;
  return with_storage(bf16, x.dtype(), y.dtype(), false, [&](auto storage) {
    using S = decltype(storage);
    const auto run = [&](auto product) {
      using Product = decltype(product);
      return inverse ? forward_padded<true, Product, S>(ctx, x, y, stored_beta, stored_gamma, problem, rp)
                     : forward_padded<false, Product, S>(ctx, x, y, stored_beta, stored_gamma, problem, rp);
    };
    if constexpr (S::kF32) {
      if (!bf16) return run(cuda::Tf32Product{});
    }
    return run(cuda::Bf16Product{});
  });
}

Tensor tensor_core_backward(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, const Tensor& stored_beta,
                            const Tensor& stored_gamma, const Problem& problem, Reparametrization<float> rp,
                            bool inverse, Tensor& partials_cache) {
  if (padded_channels(problem.channels) == 0 || !device_has_mma_sync()) return Tensor();
  if (dx && dx->dtype() != x.dtype()) return Tensor();  // x and dx share the input side's storage
  const bool bf16 = bf16_products(ctx);
  if (bf16) {
    Tensor partials =
        bf16_tile_backward(ctx, x, dy, dx, stored_beta, stored_gamma, problem, rp, inverse, partials_cache);
    if (partials.defined()) return partials;
  }
  return with_storage(bf16, x.dtype(), dy.dtype(), Tensor(), [&](auto storage) {
    using S = decltype(storage);
    const auto run = [&](auto product) {
      using Product = decltype(product);
      return inverse ? backward_padded<true, Product, S>(ctx, x, dy, dx, stored_beta, stored_gamma, problem, rp,
                                                         partials_cache)
                     : backward_padded<false, Product, S>(ctx, x, dy, dx, stored_beta, stored_gamma, problem, rp,
                                                          partials_cache);
    };
    if constexpr (S::kF32) {
      if (!bf16) return run(cuda::Tf32Product{});
    }
    return run(cuda::Bf16Product{});
  });
}

}  // namespace plexus::layers::gdn_cuda
