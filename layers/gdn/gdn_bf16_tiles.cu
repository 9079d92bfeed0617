// GDN / IGDN on bf16 tiles: the fused tensor-core kernels for bf16
// activation storage with BF16 products (x, y, dy and dx all bf16, C <= 192,
// pixels per image a multiple of 8, 16-byte aligned tensors). Math and
// notation in gdn.h; the same per-tile contractions as gdn_tensor_core.cu:
//   n        = beta + gamma x^2   [CP x T],   K = C
//   g        = gamma^T q          [CP x T],   K = C   (backward, for dx)
//   dgamma  += q (x^2)^T          [CP x CP],  K = T   (backward)
// with the same roundings: gamma, x^2 and q rounded to bf16 (nearest even)
// as mma operands, f32 accumulation, y and dx rounded once when stored.
// What differs is where the operands wait. Everything a tile needs stays in
// shared memory as bf16, as stored: x and dy arrive by 16-byte cp.async
// copies (no registers, no widening), gamma is rounded once per block, q is
// written rounded, and every mma fragment comes from one ldmatrix (x4: a
// 16x16 A operand, or the B operands of two 8-pixel tiles), plus one bf16x2
// multiply that squares x (exact product, one rounding: the same bf16 as
// rounding the f32 square). The outputs go through shared memory too, so
// they leave as whole 16-byte rows of 8 pixels.
//
// Layout. A block works on tiles of T consecutive pixels of the batch (64,
// or 128 for the C = 128 backward; a tile may span several images, an
// 8-pixel run never does, since the pixels per image are a multiple of 8,
// and each run finds its own image) and keeps
// in shared memory, rows 8 bf16 longer than their data so that the 8 rows
// an ldmatrix reads fall in 8 different 16-byte bank groups:
//   gamma [CP x CP]   effective gamma, 0 beyond the C channels, once per block;
//   beta  [CP]        f32, 1 beyond the C channels;
//   x     [2][CP x T] this tile's and the next tile's (copied while this one
//                     is computed);
//   dy    [2][CP x T] (backward) the same; dx is written over this tile's dy
//                     (each element by the thread that read it);
//   q     [CP x T]    (backward) dL/dn;
//   y     [CP x T]    (forward) the outputs.
// Blocks are persistent and grid-stride over tiles. The backward keeps its
// dgamma share in registers across its tiles and writes one partial
// [C*C + C] per block (dgamma row-major, then dbeta), which gdn.cu's
// finishing kernel sums in a fixed order.
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include <cuda_bf16.h>

#include "gdn/gdn_cuda.cuh"
#include "plexus/cuda/shared_memory_ops.h"
#include "plexus/cuda/tensor_core_product.h"

namespace plexus::layers::gdn_cuda {

using bf16 = __nv_bfloat16;

constexpr int kRun = 8;     // pixels per 16-byte copy
constexpr int kRowPad = 8;  // bf16 added to each shared row
constexpr int kK = 16;      // k of one m16n8k16 mma

// One padded channel count CP on kThreads threads and tiles of kTile
// pixels: the [CP x T] contractions on kWarpsM x kWarpsN warps, dgamma
// [CP x CP] on the first kGradientWarpsM x kGradientWarpsN warps; kMinBlocks
// resident blocks per SM.
template <int CP, int kThreads, int kTile, int kWarpsM, int kWarpsN, int kGradientWarpsM, int kGradientWarpsN,
          int kMinBlocks>
struct TileShape {
  static constexpr int channels = CP;
  static constexpr int tile = kTile;
  static constexpr int threads = kThreads;
  static constexpr int min_blocks = kMinBlocks;
  static constexpr int tile_stride = kTile + kRowPad;
  static constexpr int gamma_stride = CP + kRowPad;
  static constexpr int tile_elements = CP * tile_stride;
  static constexpr int gamma_elements = CP * gamma_stride;
  static constexpr int warps_n = kWarpsN;
  static constexpr int m_tiles = CP / (16 * kWarpsM);    // 16-channel mma tiles per warp
  static constexpr int n_tiles = kTile / (8 * kWarpsN);  // 8-pixel mma tiles per warp
  static constexpr int gradient_warps = kGradientWarpsM * kGradientWarpsN;
  static constexpr int gradient_warps_n = kGradientWarpsN;
  static constexpr int gradient_m_tiles = CP / (16 * kGradientWarpsM);
  static constexpr int gradient_n_tiles = CP / (8 * kGradientWarpsN);
  static constexpr int runs_per_row = kTile / kRun;
  static constexpr int copies = CP * runs_per_row / kThreads;  // 16-byte copies per thread and tile
  // gamma, beta, two x tiles and y.
  static constexpr std::size_t forward_bytes = 2 * gamma_elements + 4 * CP + 2 * 3 * tile_elements;
  // gamma, beta, two x and two dy tiles, q.
  static constexpr std::size_t backward_bytes = 2 * gamma_elements + 4 * CP + 2 * 5 * tile_elements;
  static_assert(kWarpsM * kWarpsN == kThreads / 32, "contraction warps");
  static_assert(gradient_warps <= kThreads / 32, "dgamma warps");
  static_assert(m_tiles * 16 * kWarpsM == CP && n_tiles * 8 * kWarpsN == kTile, "contraction tiling");
  static_assert(gradient_m_tiles * 16 * kGradientWarpsM == CP && gradient_n_tiles * 8 * kGradientWarpsN == CP,
                "dgamma tiling");
  static_assert(n_tiles % 2 == 0 && gradient_n_tiles % 2 == 0, "ldmatrix x4 reads pairs of 8-column tiles");
  static_assert(copies * kThreads == CP * runs_per_row, "tile copies");
  static_assert(kTile % kK == 0 && kThreads % runs_per_row == 0, "whole k steps and rows of runs");
  static_assert((tile_stride / 8) % 2 == 1 && (gamma_stride / 8) % 2 == 1, "rows an odd number of 16-byte units apart");
};

// Forward: 8 warps on 64-pixel tiles. C = 128: 32x32 warp tiles, two
// blocks per SM (89 KiB each). C = 192: 48x32, one block (157 KiB).
template <int CP>
struct ForwardShape;
template <>
struct ForwardShape<32> : TileShape<32, 256, 64, 2, 4, 2, 2, 3> {};
template <>
struct ForwardShape<64> : TileShape<64, 256, 64, 4, 2, 4, 2, 3> {};
template <>
struct ForwardShape<128> : TileShape<128, 256, 64, 4, 2, 4, 2, 2> {};
template <>
struct ForwardShape<192> : TileShape<192, 256, 64, 4, 2, 4, 2, 1> {};

// Backward: C = 128 on 16 warps and 128-pixel tiles, one block per SM
// (205 KiB): 32x32 warp tiles for the contractions and for dgamma (32
// accumulators a thread; 128 registers, a few values spilled). Against
// 64-pixel tiles (32x16 warp tiles), each byte of shared memory read feeds
// more products and a tile's barriers serve twice the pixels: about 10%
// faster at 128x128. Two blocks
// of 8 warps on 32-pixel tiles were no faster, and slower on small images
// (twice the blocks loading gamma). C = 192: 64-pixel tiles, 48x16 and
// 48x48 (72 registers, a few spilled). C <= 64: 8 warps, two blocks.
template <int CP>
struct BackwardShape;
template <>
struct BackwardShape<32> : TileShape<32, 256, 64, 2, 4, 2, 2, 2> {};
template <>
struct BackwardShape<64> : TileShape<64, 256, 64, 4, 2, 4, 2, 2> {};
template <>
struct BackwardShape<128> : TileShape<128, 512, 128, 4, 4, 4, 4, 1> {};
template <>
struct BackwardShape<192> : TileShape<192, 512, 64, 4, 4, 4, 4, 1> {};

namespace {

__device__ __forceinline__ unsigned bits_of(__nv_bfloat162 v) { return *reinterpret_cast<unsigned*>(&v); }

// Two bf16 values squared, each rounded to nearest even.
__device__ __forceinline__ unsigned squared(unsigned pair) {
  const __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162*>(&pair);
  return bits_of(__hmul2_rn(v, v));
}

__device__ __forceinline__ float2 widened(const bf16* pair) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(pair));
}
__device__ __forceinline__ void store_rounded(bf16* pair, float low, float high) {
  *reinterpret_cast<__nv_bfloat162*>(pair) = __floats2bfloat162_rn(low, high);
}

// mma operands from a bf16 matrix in shared memory with rows `stride` apart
// (g = lane/4, t = lane%4; m16n8k16: a = A(g, 2t..2t+1), A(g+8, 2t..),
// A(g, 2t+8..), A(g+8, 2t+8..); b = B(k=2t..2t+1, n=g), B(k=2t+8.., n=g)).
// A [m0, m0+16) x [k0, k0+16) of a matrix stored as A (K contiguous).
__device__ __forceinline__ void load_a(unsigned (&a)[4], const bf16* matrix, int stride, int m0, int k0) {
  const int lane = threadIdx.x % 32;
  cuda::load_matrix_x4(a, matrix + (m0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * stride + k0 + 8 * (lane >> 4));
}
// The same A from a matrix stored as A^T (M contiguous).
__device__ __forceinline__ void load_a_transposed(unsigned (&a)[4], const bf16* matrix, int stride, int m0, int k0) {
  const int lane = threadIdx.x % 32;
  cuda::load_matrix_x4_trans(a, matrix + (k0 + (lane & 7) + 8 * (lane >> 4)) * stride + m0 + 8 * ((lane >> 3) & 1));
}
// B of the 8-column tiles at n0 and n0 + 8, [k0, k0 + 16), from a matrix stored as B (N contiguous).
__device__ __forceinline__ void load_b_pair(unsigned (&b0)[2], unsigned (&b1)[2], const bf16* matrix, int stride,
                                            int k0, int n0) {
  const int lane = threadIdx.x % 32;
  unsigned r[4];
  cuda::load_matrix_x4_trans(r, matrix + (k0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * stride + n0 + 8 * (lane >> 4));
  b0[0] = r[0];
  b0[1] = r[1];
  b1[0] = r[2];
  b1[1] = r[3];
}
// The same from a matrix stored as B^T (K contiguous).
__device__ __forceinline__ void load_b_pair_transposed(unsigned (&b0)[2], unsigned (&b1)[2], const bf16* matrix,
                                                       int stride, int k0, int n0) {
  const int lane = threadIdx.x % 32;
  unsigned r[4];
  cuda::load_matrix_x4(r, matrix + (n0 + (lane & 7) + 8 * (lane >> 4)) * stride + k0 + 8 * ((lane >> 3) & 1));
  b0[0] = r[0];
  b0[1] = r[1];
  b1[0] = r[2];
  b1[1] = r[3];
}

// Effective gamma (rounded to bf16, 0 beyond the C channels) and beta (1
// beyond them). With whole 16-byte rows of stored gamma (vector_gamma: C a
// multiple of 4, aligned), 4 values a load, several loads in flight: this
// is most of a block's fixed cost, which dominates small images.
template <class L>
__device__ void load_parameters(const float* stored_gamma, const float* stored_beta, int channels,
                                Reparametrization<float> rp, bool vector_gamma, bf16* gamma_s, float* beta_s) {
  constexpr int CP = L::channels;
  const auto effective_gamma = [&](float stored) { return effective_value(stored, rp.gamma_bound, rp.pedestal); };
  if (vector_gamma) {
#pragma unroll 4
    for (int e = threadIdx.x; e < CP * CP / 4; e += L::threads) {
      const int i = e / (CP / 4), j = 4 * (e % (CP / 4));
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (i < channels && j < channels) {  // then j + 3 < channels too
        const float4 stored = *reinterpret_cast<const float4*>(stored_gamma + i * channels + j);
        v = make_float4(effective_gamma(stored.x), effective_gamma(stored.y), effective_gamma(stored.z),
                        effective_gamma(stored.w));
      }
      __nv_bfloat162* row = reinterpret_cast<__nv_bfloat162*>(gamma_s + i * L::gamma_stride + j);
      row[0] = __floats2bfloat162_rn(v.x, v.y);
      row[1] = __floats2bfloat162_rn(v.z, v.w);
    }
  } else {
    for (int e = threadIdx.x; e < CP * CP; e += L::threads) {
      const int i = e / CP, j = e % CP;
      const float value = i < channels && j < channels ? effective_gamma(stored_gamma[i * channels + j]) : 0.0f;
      gamma_s[i * L::gamma_stride + j] = __float2bfloat16_rn(value);
    }
  }
  for (int i = threadIdx.x; i < CP; i += L::threads)
    beta_s[i] = i < channels ? effective_value(stored_beta[i], rp.beta_bound, rp.pedestal) : 1.0f;
}

// Where this thread's 8-pixel run of the tile starting at tile_begin lies:
// element (channel c) at offset + c * pixels; valid: inside the batch.
struct Run {
  long long offset;
  bool valid;
};

template <class L>
__device__ __forceinline__ Run run_of(long long tile_begin, long long pixels, long long total_pixels, int channels) {
  const long long first = tile_begin + kRun * (threadIdx.x % L::runs_per_row);
  if (first >= total_pixels) return {0, false};
  long long image, within;
  if (first <= 0xffffffffLL && pixels <= 0xffffffffLL) {  // 32-bit division where it serves
    const auto f = static_cast<unsigned>(first), p = static_cast<unsigned>(pixels);
    image = f / p;
    within = f % p;
  } else {
    image = first / pixels;
    within = first % pixels;
  }
  return {image * channels * pixels + within, true};
}

// The tile's rows of `source` into tile_s by 16-byte asynchronous copies
// (zeros beyond the batch and the channels), as one commit group.
template <class L>
__device__ __forceinline__ void copy_tile_in(const bf16* source, long long tile_begin, long long pixels,
                                             long long total_pixels, int channels, bf16* tile_s) {
  const Run run = run_of<L>(tile_begin, pixels, total_pixels, channels);
  const int column = kRun * (threadIdx.x % L::runs_per_row);
#pragma unroll
  for (int l = 0; l < L::copies; ++l) {
    const int row = threadIdx.x / L::runs_per_row + l * (L::threads / L::runs_per_row);
    const bool valid = run.valid && row < channels;
    cuda::copy16_async_zfill(tile_s + row * L::tile_stride + column,
                             valid ? source + run.offset + static_cast<long long>(row) * pixels : source, valid);
  }
  cuda::commit_async();
}

// tile_s's rows inside the batch and the channels into `destination`, 16 bytes a store.
template <class L>
__device__ __forceinline__ void copy_tile_out(const bf16* tile_s, long long tile_begin, long long pixels,
                                              long long total_pixels, int channels, bf16* destination) {
  const Run run = run_of<L>(tile_begin, pixels, total_pixels, channels);
  if (!run.valid) return;
  const int column = kRun * (threadIdx.x % L::runs_per_row);
#pragma unroll
  for (int l = 0; l < L::copies; ++l) {
    const int row = threadIdx.x / L::runs_per_row + l * (L::threads / L::runs_per_row);
    if (row < channels)
      *reinterpret_cast<uint4*>(destination + run.offset + static_cast<long long>(row) * pixels) =
          *reinterpret_cast<const uint4*>(tile_s + row * L::tile_stride + column);
  }
}

// The warp's place in the [CP x T] contractions: rows m0 + 16 mt + [0, 16),
// pixels n0 + 8 nt + [0, 8).
template <class L>
struct WarpTile {
  int m0, n0;
  __device__ WarpTile() {
    const int warp = threadIdx.x / 32;
    m0 = (warp / L::warps_n) * L::m_tiles * 16;
    n0 = (warp % L::warps_n) * L::n_tiles * 8;
  }
};

// acc = beta + gamma x^2 on the warp's tile, over channels [0, reduce_end).
// A (m = i, k = j) = gamma_ij, B (k = j, n = p) = x_j(p)^2.
template <class L>
__device__ __forceinline__ void contract_gamma_x2(const bf16* gamma_s, const float* beta_s, const bf16* x_s,
                                                  int reduce_end, const WarpTile<L>& w,
                                                  float (&acc)[L::m_tiles][L::n_tiles][4]) {
  const int g = (threadIdx.x % 32) / 4;
#pragma unroll
  for (int mt = 0; mt < L::m_tiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < L::n_tiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = beta_s[w.m0 + 16 * mt + g + 8 * (e / 2)];
#pragma unroll 2
  for (int k0 = 0; k0 < reduce_end; k0 += kK) {
    unsigned a[L::m_tiles][4], b[L::n_tiles][2];
#pragma unroll
    for (int mt = 0; mt < L::m_tiles; ++mt) load_a(a[mt], gamma_s, L::gamma_stride, w.m0 + 16 * mt, k0);
#pragma unroll
    for (int nt = 0; nt < L::n_tiles; nt += 2) {
      load_b_pair(b[nt], b[nt + 1], x_s, L::tile_stride, k0, w.n0 + 8 * nt);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        b[nt][h] = squared(b[nt][h]);
        b[nt + 1][h] = squared(b[nt + 1][h]);
      }
    }
#pragma unroll
    for (int mt = 0; mt < L::m_tiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < L::n_tiles; ++nt) cuda::mma_bf16(acc[mt][nt], a[mt], b[nt]);
  }
}

// acc = gamma^T q on the warp's tile, over channels i in [0, reduce_end).
// A (m = k, k = i) = gamma_ik (gamma_s read transposed), B (k = i, n = p) = q_i(p).
template <class L>
__device__ __forceinline__ void contract_gamma_transposed_q(const bf16* gamma_s, const bf16* q_s, int reduce_end,
                                                            const WarpTile<L>& w,
                                                            float (&acc)[L::m_tiles][L::n_tiles][4]) {
#pragma unroll
  for (int mt = 0; mt < L::m_tiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < L::n_tiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
#pragma unroll 2
  for (int k0 = 0; k0 < reduce_end; k0 += kK) {
    unsigned a[L::m_tiles][4], b[L::n_tiles][2];
#pragma unroll
    for (int mt = 0; mt < L::m_tiles; ++mt) load_a_transposed(a[mt], gamma_s, L::gamma_stride, w.m0 + 16 * mt, k0);
#pragma unroll
    for (int nt = 0; nt < L::n_tiles; nt += 2) load_b_pair(b[nt], b[nt + 1], q_s, L::tile_stride, k0, w.n0 + 8 * nt);
#pragma unroll
    for (int mt = 0; mt < L::m_tiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < L::n_tiles; ++nt) cuda::mma_bf16(acc[mt][nt], a[mt], b[nt]);
  }
}

// gamma_grad += q (x^2)^T over the tile's pixels, on the dgamma rows
// i = m0 + 16 mt + [0, 16) and columns k = n0 + 8 nt + [0, 8).
// A (m = i, k = p) = q_i(p), B (k = p, n = k) = x_k(p)^2 (x_s read transposed).
template <class L>
__device__ __forceinline__ void accumulate_q_x2(const bf16* q_s, const bf16* x_s, int m0, int n0,
                                                float (&gamma_grad)[L::gradient_m_tiles][L::gradient_n_tiles][4]) {
#pragma unroll 2
  for (int p0 = 0; p0 < L::tile; p0 += kK) {
    unsigned a[L::gradient_m_tiles][4], b[L::gradient_n_tiles][2];
#pragma unroll
    for (int mt = 0; mt < L::gradient_m_tiles; ++mt) load_a(a[mt], q_s, L::tile_stride, m0 + 16 * mt, p0);
#pragma unroll
    for (int nt = 0; nt < L::gradient_n_tiles; nt += 2) {
      load_b_pair_transposed(b[nt], b[nt + 1], x_s, L::tile_stride, p0, n0 + 8 * nt);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        b[nt][h] = squared(b[nt][h]);
        b[nt + 1][h] = squared(b[nt + 1][h]);
      }
    }
#pragma unroll
    for (int mt = 0; mt < L::gradient_m_tiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < L::gradient_n_tiles; ++nt) cuda::mma_bf16(gamma_grad[mt][nt], a[mt], b[nt]);
  }
}

// Forward: per pixel n_i = beta_i + sum_j gamma_ij x_j^2, GDN y_i = x_i n_i^-1/2,
// IGDN y_i = x_i n_i^1/2. Launch: persistent blocks grid-striding over tiles;
// per tile two barriers (this tile's x has landed and the previous tile is
// done everywhere; y is complete in y_s).
template <class L, bool kInverse>
__global__ void __launch_bounds__(L::threads, L::min_blocks)
    gdn_bf16_tile_forward(const bf16* x, bf16* y, const float* stored_beta, const float* stored_gamma, int channels,
                          long long pixels, long long total_pixels, Reparametrization<float> rp, bool vector_gamma) {
  constexpr int MT = L::m_tiles, NT = L::n_tiles;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  bf16* gamma_s = reinterpret_cast<bf16*>(shared_bytes);
  bf16* x_buffers = gamma_s + L::gamma_elements;  // [2][CP x T]
  bf16* y_s = x_buffers + 2 * L::tile_elements;
  float* beta_s = reinterpret_cast<float*>(y_s + L::tile_elements);
  const long long tiles = (total_pixels + L::tile - 1) / L::tile;
  if (blockIdx.x < tiles) copy_tile_in<L>(x, blockIdx.x * L::tile, pixels, total_pixels, channels, x_buffers);
  load_parameters<L>(stored_gamma, stored_beta, channels, rp, vector_gamma, gamma_s, beta_s);

  const WarpTile<L> w;
  const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  const int reduce_end = (channels + kK - 1) / kK * kK;
  int buffer = 0;
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const bf16* x_s = x_buffers + buffer * L::tile_elements;
    cuda::wait_async<0>();
    __syncthreads();  // x_s has landed; every warp is done with the previous tile
    if (tile + gridDim.x < tiles)
      copy_tile_in<L>(x, (tile + gridDim.x) * L::tile, pixels, total_pixels, channels,
                      x_buffers + (buffer ^ 1) * L::tile_elements);
    float acc[MT][NT][4];
    contract_gamma_x2<L>(gamma_s, beta_s, x_s, reduce_end, w, acc);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int at = (w.m0 + 16 * mt + g + 8 * half) * L::tile_stride + w.n0 + 8 * nt + 2 * t;
          const float2 xv = widened(x_s + at);
          const float* n = acc[mt][nt] + 2 * half;
          store_rounded(y_s + at, kInverse ? xv.x * sqrtf(n[0]) : xv.x * rsqrtf(n[0]),
                        kInverse ? xv.y * sqrtf(n[1]) : xv.y * rsqrtf(n[1]));
        }
    __syncthreads();  // y_s is complete
    copy_tile_out<L>(y_s, tile * L::tile, pixels, total_pixels, channels, y);
    buffer ^= 1;
  }
}

// Fused backward, per tile (sums over the tile's pixels):
//   n = beta + gamma x^2 (recomputed), q_i = dL/dn_i (norm_gradient),
//   dx_k = dy_k f_k + 2 x_k sum_i gamma_ik q_i   (f = n^-1/2 GDN, n^1/2 IGDN)
//   dbeta_i += sum q_i,  dgamma_ik += sum q_i x_k^2
// then the block's partial [C*C + C]. Three barriers a tile (two without
// dx): x and dy have landed (and the previous tile is done everywhere), q
// is complete, dx is complete (in this tile's dy buffer).
template <class L, bool kInverse>
__global__ void __launch_bounds__(L::threads, L::min_blocks)
    gdn_bf16_tile_backward(const bf16* x, const bf16* dy, bf16* dx, const float* stored_beta, const float* stored_gamma,
                           int channels, long long pixels, long long total_pixels, Reparametrization<float> rp,
                           bool vector_gamma, float* partials) {
  constexpr int MT = L::m_tiles, NT = L::n_tiles, GMT = L::gradient_m_tiles, GNT = L::gradient_n_tiles;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  bf16* gamma_s = reinterpret_cast<bf16*>(shared_bytes);
  bf16* x_buffers = gamma_s + L::gamma_elements;        // [2][CP x T]
  bf16* dy_buffers = x_buffers + 2 * L::tile_elements;  // [2][CP x T]
  bf16* q_s = dy_buffers + 2 * L::tile_elements;
  float* beta_s = reinterpret_cast<float*>(q_s + L::tile_elements);
  const long long tiles = (total_pixels + L::tile - 1) / L::tile;
  if (blockIdx.x < tiles) {
    copy_tile_in<L>(x, blockIdx.x * L::tile, pixels, total_pixels, channels, x_buffers);
    copy_tile_in<L>(dy, blockIdx.x * L::tile, pixels, total_pixels, channels, dy_buffers);
  }
  load_parameters<L>(stored_gamma, stored_beta, channels, rp, vector_gamma, gamma_s, beta_s);

  const WarpTile<L> w;
  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  const bool gradient_warp = warp < L::gradient_warps;
  const int gradient_m0 = (warp / L::gradient_warps_n) * GMT * 16;
  const int gradient_n0 = (warp % L::gradient_warps_n) * GNT * 8;
  const int reduce_end = (channels + kK - 1) / kK * kK;
  float gamma_grad[GMT][GNT][4] = {};
  float beta_grad[MT][2] = {};
  int buffer = 0;
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const bf16* x_s = x_buffers + buffer * L::tile_elements;
    bf16* dy_s = dy_buffers + buffer * L::tile_elements;
    cuda::wait_async<0>();
    __syncthreads();  // x_s and dy_s have landed; every warp is done with the previous tile
    if (tile + gridDim.x < tiles) {
      const long long next = (tile + gridDim.x) * L::tile;
      copy_tile_in<L>(x, next, pixels, total_pixels, channels, x_buffers + (buffer ^ 1) * L::tile_elements);
      copy_tile_in<L>(dy, next, pixels, total_pixels, channels, dy_buffers + (buffer ^ 1) * L::tile_elements);
    }
    float acc[MT][NT][4];
    contract_gamma_x2<L>(gamma_s, beta_s, x_s, reduce_end, w, acc);
    // q into q_s (0 for padded channels and pixels, where x = dy = 0); dyf = dy f, kept for dx.
    float dyf[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int at = (w.m0 + 16 * mt + g + 8 * half) * L::tile_stride + w.n0 + 8 * nt + 2 * t;
          const float2 xv = widened(x_s + at), dv = widened(dy_s + at);
          float* d = dyf[mt][nt] + 2 * half;
          d[0] = dv.x;
          d[1] = dv.y;
          const float* n = acc[mt][nt] + 2 * half;
          const float q0 = norm_gradient<kInverse>(n[0], xv.x, d[0]);
          const float q1 = norm_gradient<kInverse>(n[1], xv.y, d[1]);
          beta_grad[mt][half] += q0 + q1;
          store_rounded(q_s + at, q0, q1);
        }
    __syncthreads();  // q_s is complete

    if (dx) {
      contract_gamma_transposed_q<L>(gamma_s, q_s, reduce_end, w, acc);
      // dx over this tile's dy: each element was read above by this thread alone.
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const int at = (w.m0 + 16 * mt + g + 8 * half) * L::tile_stride + w.n0 + 8 * nt + 2 * t;
            const float2 xv = widened(x_s + at);
            const float* back = acc[mt][nt] + 2 * half;
            const float* scaled = dyf[mt][nt] + 2 * half;
            store_rounded(dy_s + at, scaled[0] + 2.0f * xv.x * back[0], scaled[1] + 2.0f * xv.y * back[1]);
          }
    }
    if (gradient_warp) accumulate_q_x2<L>(q_s, x_s, gradient_m0, gradient_n0, gamma_grad);
    if (dx) {
      __syncthreads();  // dx is complete in dy_s
      copy_tile_out<L>(dy_s, tile * L::tile, pixels, total_pixels, channels, dx);
    }
    buffer ^= 1;
  }

  // The partial: dbeta through q_s (no longer read once every warp is past
  // write_beta_partial's first barrier), then dgamma.
  float* partial = partials + static_cast<long long>(blockIdx.x) * (channels * channels + channels);
  write_beta_partial<MT, L::warps_n, L::channels, L::threads>(beta_grad, w.m0, 0, channels,
                                                              reinterpret_cast<float*>(q_s), partial);
  if (gradient_warp) write_gamma_partial(gamma_grad, gradient_m0, gradient_n0, channels, partial);
}

// ---------------------------------------------------------------- host side

// Whether the bf16-tile kernels take a call: bf16 everywhere, C <= 192,
// pixels per image a multiple of 8, 16-byte aligned tensors, unless
// KernelSettings::gdn_bf16_tiles is off (then gdn_tensor_core.cu's kernels run, to compare).
bool takes(const Context& ctx, const Problem& problem, std::initializer_list<const Tensor*> tensors) {
  if (!ctx.kernel_settings().gdn_bf16_tiles || problem.channels > 192 || problem.pixels % kRun != 0) return false;
  for (const Tensor* tensor : tensors)
    if (tensor && (tensor->dtype() != DType::bf16 || !aligned16(tensor->raw_data()))) return false;
  return true;
}

bool vector_gamma(const Problem& problem, const Tensor& stored_gamma) {
  return problem.channels % 4 == 0 && aligned16(stored_gamma.raw_data());
}

template <int CP, bool kInverse>
bool launch_forward(Context& ctx, const Tensor& x, Tensor& y, const Tensor& beta, const Tensor& gamma,
                    const Problem& problem, Reparametrization<float> rp) {
  using L = ForwardShape<CP>;
  constexpr auto kernel = gdn_bf16_tile_forward<L, kInverse>;
  const long long tiles = (problem.total_pixels + L::tile - 1) / L::tile;
  const int blocks = persistent_blocks<kernel>(L::threads, L::forward_bytes, tiles);
  if (blocks == 0) return false;
  kernel<<<blocks, L::threads, L::forward_bytes, cuda::stream(ctx)>>>(
      elements<bf16>(x), elements<bf16>(y), beta.data<float>(), gamma.data<float>(), problem.channels, problem.pixels,
      problem.total_pixels, rp, vector_gamma(problem, gamma));
  cuda::check_launch("gdn_bf16_tile_forward", __FILE__, __LINE__);
  return true;
}

template <int CP, bool kInverse>
Tensor launch_backward(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, const Tensor& beta,
                       const Tensor& gamma, const Problem& problem, Reparametrization<float> rp,
                       Tensor& partials_cache) {
  using L = BackwardShape<CP>;
  constexpr auto kernel = gdn_bf16_tile_backward<L, kInverse>;
  const long long tiles = (problem.total_pixels + L::tile - 1) / L::tile;
  const int blocks = persistent_blocks<kernel>(L::threads, L::backward_bytes, tiles);
  if (blocks == 0) return Tensor();
  Tensor& partials = partials_for(partials_cache, blocks, problem, x.device());
  kernel<<<blocks, L::threads, L::backward_bytes, cuda::stream(ctx)>>>(
      elements<bf16>(x), elements<bf16>(dy), dx ? elements<bf16>(*dx) : nullptr, beta.data<float>(),
      gamma.data<float>(), problem.channels, problem.pixels, problem.total_pixels, rp, vector_gamma(problem, gamma),
      partials.data<float>());
  cuda::check_launch("gdn_bf16_tile_backward", __FILE__, __LINE__);
  return partials;
}

// fn(std::integral_constant<int, CP>{}) for the channels padded to CP = 32, 64, 128 or 192 (C <= 192).
template <class Fn>
auto with_padded_channels(int channels, Fn&& fn) {
  if (channels <= 32) return fn(std::integral_constant<int, 32>{});
  if (channels <= 64) return fn(std::integral_constant<int, 64>{});
  if (channels <= 128) return fn(std::integral_constant<int, 128>{});
  return fn(std::integral_constant<int, 192>{});
}

}  // namespace

bool bf16_tile_forward(Context& ctx, const Tensor& x, Tensor& y, const Tensor& stored_beta, const Tensor& stored_gamma,
                       const Problem& problem, Reparametrization<float> rp, bool inverse) {
  if (!takes(ctx, problem, {&x, &y})) return false;
  return with_padded_channels(problem.channels, [&](auto padded) {
    constexpr int CP = decltype(padded)::value;
    return inverse ? launch_forward<CP, true>(ctx, x, y, stored_beta, stored_gamma, problem, rp)
                   : launch_forward<CP, false>(ctx, x, y, stored_beta, stored_gamma, problem, rp);
  });
}

Tensor bf16_tile_backward(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, const Tensor& stored_beta,
                          const Tensor& stored_gamma, const Problem& problem, Reparametrization<float> rp, bool inverse,
                          Tensor& partials_cache) {
  if (!takes(ctx, problem, {&x, &dy, dx})) return Tensor();
  return with_padded_channels(problem.channels, [&](auto padded) {
    constexpr int CP = decltype(padded)::value;
    return inverse ? launch_backward<CP, true>(ctx, x, dy, dx, stored_beta, stored_gamma, problem, rp, partials_cache)
                   : launch_backward<CP, false>(ctx, x, dy, dx, stored_beta, stored_gamma, problem, rp, partials_cache);
  });
}

}  // namespace plexus::layers::gdn_cuda
