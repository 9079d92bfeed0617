// CUDA kernels of GDN / IGDN (math and notation in gdn.h).
//
// Layout. The input is NCHW, so an image is a [C, P] matrix (P pixels, each
// channel row contiguous). A block works on a tile of kTilePixels
// consecutive pixels (counted over the whole batch, so a tile may span two
// images and rank-2 inputs [N, C] work too) and holds, in shared memory:
//   gamma [C, C]   the effective gamma, row-major, loaded once per block;
//   x^2   [C, 64]  the tile's squared inputs, channel-major like NCHW, so the
//                  load is coalesced along pixels;
//   q     [C, 64]  (backward) dL/dn of the tile.
// Each per-tile contraction is then a small GEMM computed from shared memory
// with register blocking: 256 threads as 16 row groups x 16 pixel groups,
// each owning C/16 channels x 4 pixels (like a GEMM micro-tile). Blocks
// grid-stride over tiles; the backward keeps its share of dgamma (C/16 x C/16
// per thread) and dbeta in registers across all its tiles and writes one
// partial per block, summed in a fixed order by a small finishing kernel
// that also applies the reparametrisation (deterministic, no atomics).
// Nothing is replicated and there is no separate x^2 tensor: x and dy are
// read from global memory once per direction (x again from L2 in the
// epilogues).
//
// Which kernels run:
//   f32, TF32 allowed (Context::allow_tf32), C <= 256, compute capability
//       >= 8.0: the tensor-core kernels of gdn_tensor_core.cu (same layout,
//       the contractions as TF32 MMAs, or BF16 MMAs when the precision is
//       bf16; at C = 256 gamma split in two halves);
//   f32 otherwise, C <= 128, and f64, C <= 64: the fused kernels below, on
//       FP32 (FP64) FMA units (gamma 66 KiB at C = 128: 2 blocks per SM
//       forward, 1 backward on an H100); C is padded up to 32, 64 or 128 with
//       zero gamma rows/columns and beta 1;
//   larger C, and GPUs without the shared memory: the general path,
//       element-wise kernels with an O(C) loop per element, reading through
//       the caches; its backward keeps dL/dn and x^2 in two temporaries and
//       gets dgamma as their product from cuBLAS (a TF32 GEMM when allowed).
// Why not larger C here: the FMA backward keeps (C/16)^2 dgamma sums per
// thread (144 registers at C = 192), and at C = 256 gamma alone (256 KiB)
// exceeds an H100's shared memory (the tensor-core kernels split it).
#include <cstdint>
#include <type_traits>

#include "activation_storage.h"
#include "gdn/gdn.h"
#include "gdn/gdn_cuda.cuh"
#include "plexus/cuda/blas.h"

namespace plexus::layers {

namespace {

using namespace gdn_cuda;

constexpr int kThreads = 256;
constexpr int kTilePixels = 64;
constexpr int kPixelsPerThread = 4;  // per thread and row; 16 groups x 4 = 64
constexpr int kGroups = 16;          // row groups = pixel groups = 16

// N consecutive elements; `source` aligned to N (N % 4 == 0) or 2 elements.
template <int N, typename T>
__device__ __forceinline__ void load_row(const T* source, T* out) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int k = 0; k < N; k += 4) load4(source + k, out + k);
  } else if constexpr (N % 2 == 0) {
#pragma unroll
    for (int k = 0; k < N; k += 2) load2(source + k, out + k);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = source[k];
  }
}

// Shared-memory geometry of the fused kernels for C padded to CP.
template <typename T, int CP>
struct FusedLayout {
  static_assert(CP == 32 || CP == 64 || CP == 128, "CP must be 32, 64 or 128");
  static constexpr int rows_per_thread = CP / kGroups;  // 2, 4 or 8
  static constexpr int gamma_stride = CP + 4;           // padding: see the bank notes below
  static constexpr int tile_stride = kTilePixels + 4;   // 68: rows 16 B apart mod 128 B
  static constexpr int gamma_elements = CP * gamma_stride;
  static constexpr int tile_elements = CP * tile_stride;
  static constexpr std::size_t forward_bytes = sizeof(T) * (gamma_elements + CP + tile_elements);
  static constexpr std::size_t backward_bytes = sizeof(T) * (gamma_elements + CP + 2 * tile_elements);
};

// Effective gamma [CP, CP] (row-major, zero-padded) and beta [CP] (padded
// with 1 so padded rows never divide by zero) into shared memory.
template <typename T, int CP>
__device__ void load_parameters(const T* stored_beta, const T* stored_gamma, int channels, Reparametrization<T> rp,
                                T* gamma_s, T* beta_s) {
  using L = FusedLayout<T, CP>;
  for (int e = threadIdx.x; e < CP * CP; e += kThreads) {
    int i = e / CP, j = e % CP;
    gamma_s[i * L::gamma_stride + j] =
        i < channels && j < channels ? effective_value(stored_gamma[i * channels + j], rp.gamma_bound, rp.pedestal)
                                     : T(0);
  }
  for (int i = threadIdx.x; i < CP; i += kThreads)
    beta_s[i] = i < channels ? effective_value(stored_beta[i], rp.beta_bound, rp.pedestal) : T(1);
}

// x^2 of the tile's pixels [tile_begin, tile_begin + 64) into x2_s [CP, 68];
// zero outside the image batch and for padded channels. Thread t loads pixel
// t % 64 of channels t / 64, t / 64 + 4, ...: coalesced along pixels.
template <typename T, int CP>
__device__ void load_squared_tile(const T* x, long long tile_begin, long long total_pixels, long long pixels,
                                  int channels, T* x2_s) {
  using L = FusedLayout<T, CP>;
  constexpr int channel_step = kThreads / kTilePixels;  // 4
  const int pixel = threadIdx.x % kTilePixels;
  const long long g = tile_begin + pixel;
  const bool valid = g < total_pixels;
  const long long offset = valid ? (g / pixels) * channels * pixels + g % pixels : 0;
#pragma unroll
  for (int k = 0; k < CP / channel_step; ++k) {
    const int j = threadIdx.x / kTilePixels + k * channel_step;
    T v = valid && j < channels ? x[offset + j * pixels] : T(0);
    x2_s[j * L::tile_stride + pixel] = v * v;
  }
}

// acc[r][c] += sum_j gamma_ij x2_j(p), i = row_group * RM + r, p = 4 * pixel_group + c:
// n = gamma x^2 on the tile. gamma fragments are read 4 columns at a time
// (2 distinct addresses per warp: broadcast), x^2 as 16 consecutive float4.
template <typename T, int CP>
__device__ __forceinline__ void contract_gamma_x2(const T* gamma_s, const T* x2_s, int reduce_end,
                                                  T (&acc)[CP / kGroups][kPixelsPerThread], int row_group,
                                                  int pixel_group) {
  using L = FusedLayout<T, CP>;
  constexpr int RM = L::rows_per_thread;
  const T* a_base = gamma_s + row_group * RM * L::gamma_stride;
  const T* b_base = x2_s + pixel_group * kPixelsPerThread;
#pragma unroll 2
  for (int j = 0; j < reduce_end; j += 4) {
    T a[RM][4];
    T b[4][kPixelsPerThread];
#pragma unroll
    for (int r = 0; r < RM; ++r) load4(a_base + r * L::gamma_stride + j, a[r]);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) load4(b_base + (j + jj) * L::tile_stride, b[jj]);
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj)
#pragma unroll
        for (int c = 0; c < kPixelsPerThread; ++c) acc[r][c] += a[r][jj] * b[jj][c];
  }
}

// acc[r][c] += sum_i gamma_ik q_i(p), k = row_group * RM + r: gamma^T q on the
// tile. A row of gamma is contiguous in k, so RM values come in one or two
// vector loads (broadcast), q as one float4.
template <typename T, int CP>
__device__ __forceinline__ void contract_gamma_transposed_q(const T* gamma_s, const T* q_s, int reduce_end,
                                                            T (&acc)[CP / kGroups][kPixelsPerThread], int row_group,
                                                            int pixel_group) {
  using L = FusedLayout<T, CP>;
  constexpr int RM = L::rows_per_thread;
#pragma unroll 4
  for (int i = 0; i < reduce_end; ++i) {
    T a[RM];
    T b[kPixelsPerThread];
    load_row<RM>(gamma_s + i * L::gamma_stride + row_group * RM, a);
    load4(q_s + i * L::tile_stride + pixel_group * kPixelsPerThread, b);
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
      for (int c = 0; c < kPixelsPerThread; ++c) acc[r][c] += a[r] * b[c];
  }
}

// acc[a][b] += sum_p q_i(p) x_k(p)^2 over the tile's 64 pixels,
// i = row_group + 16 a, k = column_group + 16 b: the tile's dgamma. Rows are
// strided by 16 so the 16 distinct x^2 rows a warp reads sit 16 B apart mod
// 128 B (row stride 68 elements): no bank conflicts.
template <typename T, int CP>
__device__ __forceinline__ void accumulate_q_x2(const T* q_s, const T* x2_s, T (&acc)[CP / kGroups][CP / kGroups],
                                                int row_group, int column_group) {
  using L = FusedLayout<T, CP>;
  constexpr int GM = CP / kGroups;
#pragma unroll 2
  for (int p = 0; p < kTilePixels; p += 4) {
    T qa[GM][4];
    T xb[GM][4];
#pragma unroll
    for (int a = 0; a < GM; ++a) load4(q_s + (row_group + kGroups * a) * L::tile_stride + p, qa[a]);
#pragma unroll
    for (int b = 0; b < GM; ++b) load4(x2_s + (column_group + kGroups * b) * L::tile_stride + p, xb[b]);
#pragma unroll
    for (int a = 0; a < GM; ++a)
#pragma unroll
      for (int b = 0; b < GM; ++b)
#pragma unroll
        for (int pp = 0; pp < 4; ++pp) acc[a][b] += qa[a][pp] * xb[b][pp];
  }
}

// Forward, fused: per pixel n_i = beta_i + sum_j gamma_ij x_j^2,
// GDN y_i = x_i n_i^-1/2, IGDN y_i = x_i n_i^1/2.
// Launch: persistent blocks of 256 threads grid-striding over 64-pixel tiles;
// gamma stays in shared memory for all of a block's tiles.
template <typename T, int CP, bool kInverse>
__global__ void __launch_bounds__(kThreads, 2)
    gdn_fused_forward(const T* x, T* y, const T* stored_beta, const T* stored_gamma, int channels, long long pixels,
                      long long total_pixels, Reparametrization<T> rp, bool vector_io) {
  using L = FusedLayout<T, CP>;
  constexpr int RM = L::rows_per_thread;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* gamma_s = reinterpret_cast<T*>(shared_bytes);
  T* beta_s = gamma_s + L::gamma_elements;
  T* x2_s = beta_s + CP;
  load_parameters<T, CP>(stored_beta, stored_gamma, channels, rp, gamma_s, beta_s);

  const int row_group = threadIdx.x / kGroups;
  const int pixel_group = threadIdx.x % kGroups;
  const int reduce_end = (channels + 3) / 4 * 4;
  const long long tiles = (total_pixels + kTilePixels - 1) / kTilePixels;
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const long long tile_begin = tile * kTilePixels;
    __syncthreads();  // the previous tile's x2_s is no longer read (and gamma_s is ready)
    load_squared_tile<T, CP>(x, tile_begin, total_pixels, pixels, channels, x2_s);
    __syncthreads();

    T acc[RM][kPixelsPerThread];
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
      for (int c = 0; c < kPixelsPerThread; ++c) acc[r][c] = beta_s[row_group * RM + r];
    contract_gamma_x2<T, CP>(gamma_s, x2_s, reduce_end, acc, row_group, pixel_group);

    const PixelRun<kPixelsPerThread> quad = pixel_run<kPixelsPerThread>(tile_begin + pixel_group * kPixelsPerThread,
                                                                        total_pixels, pixels, channels, vector_io);
#pragma unroll
    for (int r = 0; r < RM; ++r) {
      const int i = row_group * RM + r;
      if (i >= channels) continue;
      T xv[kPixelsPerThread], yv[kPixelsPerThread];
      load_run<kPixelsPerThread>(x, quad, i * pixels, xv);
#pragma unroll
      for (int c = 0; c < kPixelsPerThread; ++c)
        yv[c] = kInverse ? xv[c] * sqrt(acc[r][c]) : xv[c] * reciprocal_sqrt(acc[r][c]);
      store_run<kPixelsPerThread>(y, quad, i * pixels, yv);
    }
  }
}

// Backward, fused, per tile (sums over the tile's pixels):
//   n = gamma x^2 + beta (recomputed), q_i = dL/dn_i:
//     GDN  q_i = -1/2 dy_i x_i n_i^-3/2      IGDN q_i = 1/2 dy_i x_i n_i^-1/2
//   dx_k = dy_k f_k + 2 x_k sum_i gamma_ik q_i   (f = n^-1/2 GDN, n^1/2 IGDN)
//   dbeta_i += sum q_i,  dgamma_ik += sum q_i x_k^2
// then one [C*C + C] partial per block: dgamma row-major, then dbeta.
// Launch: persistent blocks of 256 threads over 64-pixel tiles (1 per SM at
// C = 128: gamma, x^2 and q tiles take 135 KiB); dgamma stays in registers.
template <typename T, int CP, bool kInverse>
__global__ void __launch_bounds__(kThreads, 1)
    gdn_fused_backward(const T* x, const T* dy, T* dx, const T* stored_beta, const T* stored_gamma, int channels,
                       long long pixels, long long total_pixels, Reparametrization<T> rp, bool vector_io, T* partials) {
  using L = FusedLayout<T, CP>;
  constexpr int RM = L::rows_per_thread;
  constexpr int GM = CP / kGroups;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* gamma_s = reinterpret_cast<T*>(shared_bytes);
  T* beta_s = gamma_s + L::gamma_elements;
  T* x2_s = beta_s + CP;
  T* q_s = x2_s + L::tile_elements;
  load_parameters<T, CP>(stored_beta, stored_gamma, channels, rp, gamma_s, beta_s);

  const int row_group = threadIdx.x / kGroups;
  const int pixel_group = threadIdx.x % kGroups;  // also the dgamma column group
  const int reduce_end = (channels + 3) / 4 * 4;
  const long long tiles = (total_pixels + kTilePixels - 1) / kTilePixels;

  T gamma_grad[GM][GM];
  T beta_grad[RM];
#pragma unroll
  for (int a = 0; a < GM; ++a)
#pragma unroll
    for (int b = 0; b < GM; ++b) gamma_grad[a][b] = T(0);
#pragma unroll
  for (int r = 0; r < RM; ++r) beta_grad[r] = T(0);

  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const long long tile_begin = tile * kTilePixels;
    __syncthreads();  // the previous tile's x2_s and q_s are no longer read
    load_squared_tile<T, CP>(x, tile_begin, total_pixels, pixels, channels, x2_s);
    __syncthreads();

    T acc[RM][kPixelsPerThread];
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
      for (int c = 0; c < kPixelsPerThread; ++c) acc[r][c] = beta_s[row_group * RM + r];
    contract_gamma_x2<T, CP>(gamma_s, x2_s, reduce_end, acc, row_group, pixel_group);

    // q into q_s (0 for padded channels and pixels); dy f kept for dx.
    const PixelRun<kPixelsPerThread> quad = pixel_run<kPixelsPerThread>(tile_begin + pixel_group * kPixelsPerThread,
                                                                        total_pixels, pixels, channels, vector_io);
    T dy_scaled[RM][kPixelsPerThread];
#pragma unroll
    for (int r = 0; r < RM; ++r) {
      const int i = row_group * RM + r;
      T xv[kPixelsPerThread] = {}, dyv[kPixelsPerThread] = {}, qv[kPixelsPerThread];
      if (i < channels) {
        load_run<kPixelsPerThread>(x, quad, i * pixels, xv);
        load_run<kPixelsPerThread>(dy, quad, i * pixels, dyv);
      }
#pragma unroll
      for (int c = 0; c < kPixelsPerThread; ++c) {
        const T root = reciprocal_sqrt(acc[r][c]);  // n^-1/2
        if (kInverse) {
          qv[c] = T(0.5) * dyv[c] * xv[c] * root;
          dy_scaled[r][c] = dyv[c] * sqrt(acc[r][c]);
        } else {
          qv[c] = T(-0.5) * dyv[c] * xv[c] * root * root * root;
          dy_scaled[r][c] = dyv[c] * root;
        }
        beta_grad[r] += qv[c];
      }
      store4(q_s + i * L::tile_stride + pixel_group * kPixelsPerThread, qv);
    }
    __syncthreads();

    if (dx) {
#pragma unroll
      for (int r = 0; r < RM; ++r)
#pragma unroll
        for (int c = 0; c < kPixelsPerThread; ++c) acc[r][c] = T(0);
      contract_gamma_transposed_q<T, CP>(gamma_s, q_s, reduce_end, acc, row_group, pixel_group);
#pragma unroll
      for (int r = 0; r < RM; ++r) {
        const int k = row_group * RM + r;
        if (k >= channels) continue;
        T xv[kPixelsPerThread], dxv[kPixelsPerThread];
        load_run<kPixelsPerThread>(x, quad, k * pixels, xv);
#pragma unroll
        for (int c = 0; c < kPixelsPerThread; ++c) dxv[c] = dy_scaled[r][c] + T(2) * xv[c] * acc[r][c];
        store_run<kPixelsPerThread>(dx, quad, k * pixels, dxv);
      }
    }
    accumulate_q_x2<T, CP>(q_s, x2_s, gamma_grad, row_group, pixel_group);
  }

  // This block's partial sums: dgamma, then dbeta summed over the 16 pixel
  // groups of each row group (lanes 0-15 and 16-31 of a warp are two row groups).
  T* partial = partials + static_cast<long long>(blockIdx.x) * (channels * channels + channels);
#pragma unroll
  for (int a = 0; a < GM; ++a) {
    const int i = row_group + kGroups * a;
#pragma unroll
    for (int b = 0; b < GM; ++b) {
      const int k = pixel_group + kGroups * b;
      if (i < channels && k < channels) partial[i * channels + k] = gamma_grad[a][b];
    }
  }
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    T sum = beta_grad[r];
#pragma unroll
    for (int offset = kGroups / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset, kGroups);
    const int i = row_group * RM + r;
    if (pixel_group == 0 && i < channels) partial[channels * channels + i] = sum;
  }
}

// General path, forward: one thread per output element (b, i, p),
// n_i = beta_i + sum_j gamma_ij x_j^2 read through the caches (the warp's
// threads share i, so gamma_ij is a broadcast and x_j(p) coalesced).
template <typename T>
__global__ void gdn_general_forward(const T* x, T* y, const T* beta, const T* gamma, int channels, long long pixels,
                                    long long count, bool inverse) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    const long long p = e % pixels;
    const int i = static_cast<int>((e / pixels) % channels);
    const long long base = (e / pixels / channels) * channels * pixels + p;
    T n = beta[i];
    for (int j = 0; j < channels; ++j) {
      const T v = x[base + j * pixels];
      n += gamma[i * channels + j] * v * v;
    }
    y[e] = inverse ? x[e] * sqrt(n) : x[e] * reciprocal_sqrt(n);
  }
}

// General path, backward step 1: q_i = dL/dn_i per element (b, i, p):
// GDN -1/2 dy_i x_i n_i^-3/2, IGDN 1/2 dy_i x_i n_i^-1/2; and x_i^2 for the
// dgamma product of step 3. Launch: one thread per element, grid-stride, as
// in gdn_general_forward (coalesced along pixels, gamma broadcast).
template <typename T>
__global__ void gdn_general_norm_gradient(const T* x, const T* dy, T* q, T* x_squared, const T* beta, const T* gamma,
                                          int channels, long long pixels, long long count, bool inverse) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    const long long p = e % pixels;
    const int i = static_cast<int>((e / pixels) % channels);
    const long long base = (e / pixels / channels) * channels * pixels + p;
    T n = beta[i];
    for (int j = 0; j < channels; ++j) {
      const T v = x[base + j * pixels];
      n += gamma[i * channels + j] * v * v;
    }
    const T root = reciprocal_sqrt(n);
    q[e] = inverse ? T(0.5) * dy[e] * x[e] * root : T(-0.5) * dy[e] * x[e] * root * root * root;
    x_squared[e] = x[e] * x[e];
  }
}

// General path, backward step 2: dx_k = dy_k f_k + 2 x_k sum_i gamma_ik q_i
// per element (b, k, p), f = n^-1/2 (GDN) or n^1/2 (IGDN), n recomputed.
// Launch: one thread per element, grid-stride, as in gdn_general_forward.
template <typename T>
__global__ void gdn_general_input_gradient(const T* x, const T* dy, const T* q, T* dx, const T* beta, const T* gamma,
                                           int channels, long long pixels, long long count, bool inverse) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    const long long p = e % pixels;
    const int k = static_cast<int>((e / pixels) % channels);
    const long long base = (e / pixels / channels) * channels * pixels + p;
    T n = beta[k];
    T back = T(0);
    for (int j = 0; j < channels; ++j) {
      const T v = x[base + j * pixels];
      n += gamma[k * channels + j] * v * v;
      back += gamma[j * channels + k] * q[base + j * pixels];
    }
    const T scale = inverse ? sqrt(n) : reciprocal_sqrt(n);
    dx[e] = dy[e] * scale + T(2) * x[e] * back;
  }
}

// General path, backward step 3 (dgamma_ik = sum q_i x_k^2 is a cuBLAS
// product of the two temporaries, see backward_cuda) and dbeta_i = sum q_i:
// one block per channel i, tree-reduced in shared memory, into sums[C*C + i].
template <typename T>
__global__ void gdn_general_beta_sums(const T* q, int channels, long long pixels, long long total_pixels, T* sums) {
  __shared__ T partial[kThreads];
  const int i = blockIdx.x;
  T sum = T(0);
  for (long long g = threadIdx.x; g < total_pixels; g += blockDim.x)
    sum += q[(g / pixels) * channels * pixels + i * pixels + g % pixels];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[static_cast<long long>(channels) * channels + i] = partial[0];
}

// Effective parameters for the general path: [beta (C) | gamma (C*C)],
// value = max(stored, bound)^2 - pedestal. One thread per element.
template <typename T>
__global__ void gdn_effective_parameters(const T* stored_beta, const T* stored_gamma, int channels,
                                         Reparametrization<T> rp, T* values) {
  const long long count = static_cast<long long>(channels) * channels + channels;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x)
    values[e] = e < channels ? effective_value(stored_beta[e], rp.beta_bound, rp.pedestal)
                             : effective_value(stored_gamma[e - channels], rp.gamma_bound, rp.pedestal);
}

// Finishing step: g = sum over the partials (fixed order) of dL/dvalue for
// element e of [dgamma (C*C) | dbeta (C)], then through the reparametrisation
//   dL/dstored += 2 max(stored, bound) g  where stored >= bound or g < 0
// (tfc's "identity if towards" lower bound).
// Launch: blocks of 32 elements x kPartialSlices slices; slice s sums
// partials s, s + kPartialSlices, ... in order, then slice 0 adds the slices
// in order (a fixed order: deterministic), so a thread has only about
// partials / 8 loads to wait for instead of one chain over all of them.
constexpr int kPartialSlices = kThreads / 32;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    gdn_parameter_gradients(const T* partials, int partial_count, int channels, const T* stored_beta,
                            const T* stored_gamma, T* beta_grad, T* gamma_grad, Reparametrization<T> rp) {
  __shared__ T slice_sums[kPartialSlices][32];
  const long long gamma_count = static_cast<long long>(channels) * channels;
  const long long count = gamma_count + channels;
  const int lane = threadIdx.x % 32, slice = threadIdx.x / 32;
  const long long e = blockIdx.x * 32LL + lane;
  T g = T(0);
  if (e < count)
    for (int b = slice; b < partial_count; b += kPartialSlices) g += partials[b * count + e];
  slice_sums[slice][lane] = g;
  __syncthreads();
  if (slice != 0 || e >= count) return;
  g = slice_sums[0][lane];
  for (int s = 1; s < kPartialSlices; ++s) g += slice_sums[s][lane];
  const bool is_gamma = e < gamma_count;
  const T stored = is_gamma ? stored_gamma[e] : stored_beta[e - gamma_count];
  const T bound = is_gamma ? rp.gamma_bound : rp.beta_bound;
  const bool passes = stored >= bound || g < T(0);
  const T grad = passes ? T(2) * (stored > bound ? stored : bound) * g : T(0);
  if (is_gamma) gamma_grad[e] += grad;
  else beta_grad[e - gamma_count] += grad;
}

// dL/dstored of beta and gamma += the reparametrised sums of the
// partial_count rows of `partials` [partial_count, C*C + C].
template <typename T>
void launch_parameter_gradients(Context& ctx, const T* partials, int partial_count, int channels, Parameter& beta,
                                Parameter& gamma, Reparametrization<T> rp) {
  const long long sums = static_cast<long long>(channels) * channels + channels;
  const auto blocks = static_cast<unsigned int>((sums + 31) / 32);
  gdn_parameter_gradients<T><<<blocks, kThreads, 0, cuda::stream(ctx)>>>(partials, partial_count, channels,
                                                                         beta.value.data<T>(), gamma.value.data<T>(),
                                                                         beta.grad.data<T>(), gamma.grad.data<T>(), rp);
  cuda::check_launch("gdn_parameter_gradients", __FILE__, __LINE__);
}

// ---------------------------------------------------------------- host side

// C padded for the fused kernels, or 0 when C is too large for them.
template <typename T>
int fused_channels(int channels) {
  if (channels <= 32) return 32;
  if (channels <= 64) return 64;
  if (channels <= 128 && sizeof(T) == 4) return 128;
  return 0;
}

// Parameter gradients from per-block partial sums [blocks, C*C + C] (dgamma
// row-major, then dbeta, with respect to the effective values).
template <typename T>
void sum_parameter_gradients(Context& ctx, const Tensor& partials, Parameter& beta, Parameter& gamma, int channels,
                             Reparametrization<T> rp) {
  launch_parameter_gradients<T>(ctx, partials.data<T>(), static_cast<int>(partials.dim(0)), channels, beta, gamma, rp);
}

template <typename T, int CP, bool kInverse>
bool launch_fused_forward(Context& ctx, const Tensor& x, Tensor& y, const Tensor& beta, const Tensor& gamma,
                          const Problem& problem, Reparametrization<T> rp) {
  const std::size_t shared = FusedLayout<T, CP>::forward_bytes;
  const long long tiles = (problem.total_pixels + kTilePixels - 1) / kTilePixels;
  const int blocks = persistent_blocks<gdn_fused_forward<T, CP, kInverse>>(kThreads, shared, tiles);
  if (blocks == 0) return false;
  const bool vector_io = problem.pixels % 4 == 0 && aligned16(x.data<T>()) && aligned16(y.data<T>());
  gdn_fused_forward<T, CP, kInverse><<<blocks, kThreads, shared, cuda::stream(ctx)>>>(
      x.data<T>(), y.data<T>(), beta.data<T>(), gamma.data<T>(), problem.channels, problem.pixels, problem.total_pixels,
      rp, vector_io);
  cuda::check_launch("gdn_fused_forward", __FILE__, __LINE__);
  return true;
}

template <typename T, int CP, bool kInverse>
bool launch_fused_backward(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, Parameter& beta,
                           Parameter& gamma, const Problem& problem, Reparametrization<T> rp) {
  const std::size_t shared = FusedLayout<T, CP>::backward_bytes;
  const long long tiles = (problem.total_pixels + kTilePixels - 1) / kTilePixels;
  const int blocks = persistent_blocks<gdn_fused_backward<T, CP, kInverse>>(kThreads, shared, tiles);
  if (blocks == 0) return false;
  const long long sums = static_cast<long long>(problem.channels) * problem.channels + problem.channels;
  Tensor partials({static_cast<std::int64_t>(blocks), static_cast<std::int64_t>(sums)}, x.dtype(), x.device());
  const bool vector_io =
      problem.pixels % 4 == 0 && aligned16(x.data<T>()) && aligned16(dy.data<T>()) && (!dx || aligned16(dx->data<T>()));
  gdn_fused_backward<T, CP, kInverse><<<blocks, kThreads, shared, cuda::stream(ctx)>>>(
      x.data<T>(), dy.data<T>(), dx ? dx->data<T>() : nullptr, beta.value.data<T>(), gamma.value.data<T>(),
      problem.channels, problem.pixels, problem.total_pixels, rp, vector_io, partials.data<T>());
  cuda::check_launch("gdn_fused_backward", __FILE__, __LINE__);
  sum_parameter_gradients<T>(ctx, partials, beta, gamma, problem.channels, rp);
  return true;
}

template <typename T, bool kInverse>
bool try_fused_forward(Context& ctx, const Tensor& x, Tensor& y, const Tensor& beta, const Tensor& gamma,
                       const Problem& problem, Reparametrization<T> rp) {
  switch (fused_channels<T>(problem.channels)) {
    case 32:
      return launch_fused_forward<T, 32, kInverse>(ctx, x, y, beta, gamma, problem, rp);
    case 64:
      return launch_fused_forward<T, 64, kInverse>(ctx, x, y, beta, gamma, problem, rp);
    case 128:
      if constexpr (sizeof(T) == 4) return launch_fused_forward<T, 128, kInverse>(ctx, x, y, beta, gamma, problem, rp);
      return false;
    default:
      return false;
  }
}

template <typename T, bool kInverse>
bool try_fused_backward(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, Parameter& beta, Parameter& gamma,
                        const Problem& problem, Reparametrization<T> rp) {
  switch (fused_channels<T>(problem.channels)) {
    case 32:
      return launch_fused_backward<T, 32, kInverse>(ctx, x, dy, dx, beta, gamma, problem, rp);
    case 64:
      return launch_fused_backward<T, 64, kInverse>(ctx, x, dy, dx, beta, gamma, problem, rp);
    case 128:
      if constexpr (sizeof(T) == 4)
        return launch_fused_backward<T, 128, kInverse>(ctx, x, dy, dx, beta, gamma, problem, rp);
      return false;
    default:
      return false;
  }
}

// [beta | gamma] effective values, for the general path.
template <typename T>
Tensor effective_parameters(Context& ctx, const Tensor& beta, const Tensor& gamma, int channels,
                            Reparametrization<T> rp) {
  const long long count = static_cast<long long>(channels) * channels + channels;
  Tensor values({static_cast<std::int64_t>(count)}, beta.dtype(), beta.device());
  gdn_effective_parameters<T><<<cuda::blocks_for(count), kThreads, 0, cuda::stream(ctx)>>>(
      beta.data<T>(), gamma.data<T>(), channels, rp, values.data<T>());
  cuda::check_launch("gdn_effective_parameters", __FILE__, __LINE__);
  return values;
}

// General path: dgamma_ik = sum over images and pixels of q_i x_k^2, i.e.
// sum_b Q_b (X_b^2)^T with Q_b, X_b^2 the [C, P] matrices of image b.
// Rank-2 inputs [N, C] (P = 1) are one product Q^T X^2 over all N rows.
template <typename T>
void accumulate_gamma_sums(Context& ctx, const T* q, const T* x_squared, const Problem& problem, T* gamma_sums) {
  const int channels = problem.channels;
  const long long images = problem.total_pixels / problem.pixels;
  if (problem.pixels == 1) {
    cuda::gemm<T>(ctx, true, false, channels, channels, static_cast<int>(images), T(1), q, x_squared, T(0), gamma_sums);
    return;
  }
  const long long image_size = static_cast<long long>(channels) * problem.pixels;
  for (long long b = 0; b < images; ++b)
    cuda::gemm<T>(ctx, false, true, channels, channels, static_cast<int>(problem.pixels), T(1), q + b * image_size,
                  x_squared + b * image_size, b == 0 ? T(0) : T(1), gamma_sums);
}

// The tensor-core backward (when the context allows TF32 or BF16 products)
// and the parameter gradients from its partial sums; false when it cannot
// run here, having launched nothing.
bool try_tensor_core_backward(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx, Parameter& beta,
                              Parameter& gamma, const Problem& problem, Reparametrization<float> rp, bool inverse,
                              Tensor& partials_cache) {
  if (!ctx.allow_tf32()) return false;
  const Tensor partials =
      tensor_core_backward(ctx, x, dy, dx, beta.value, gamma.value, problem, rp, inverse, partials_cache);
  if (!partials.defined()) return false;
  sum_parameter_gradients<float>(ctx, partials, beta, gamma, problem.channels, rp);
  return true;
}

// The layer's reparametrisation constants in the kernels' type T.
template <typename T>
Reparametrization<T> reparametrization(double pedestal, double beta_bound, double gamma_bound) {
  return {static_cast<T>(pedestal), static_cast<T>(beta_bound), static_cast<T>(gamma_bound)};
}

}  // namespace

// bf16 storage: the tensor-core kernels read and write bf16 themselves
// under BF16 products up to C = 192 (gdn_cuda.cuh says which dtypes); any
// other call with a bf16 tensor runs the f32 kernels on f32 stand-ins.
void GDN::forward_cuda(Context& ctx, const ConstTensors& inputs, const MutableTensors& outputs) {
  check_channels(*inputs[0]);
  const Tensor& x = *inputs[0];
  Tensor& y = *outputs[0];
  if (x.dtype() != DType::bf16 && y.dtype() != DType::bf16) return forward_cuda_float(ctx, x, y);
  const Problem problem = problem_of(x);
  if (problem.count == 0) return;
  const auto rp = reparametrization<float>(pedestal(), beta_bound(), gamma_bound());
  if (ctx.allow_tf32() &&
      tensor_core_forward(ctx, x, y, parameter("beta").value, parameter("gamma").value, problem, rp, inverse_))
    return;
  F32Output y_f32(ctx, y, stand_ins_.output);
  forward_cuda_float(ctx, f32_stand_in(ctx, x, stand_ins_.input), y_f32.f32());
  y_f32.store(ctx);
}

void GDN::backward_cuda(Context& ctx, const ConstTensors& inputs, const ConstTensors&, const ConstTensors& output_grads,
                        const MutableTensors& input_grads) {
  check_channels(*inputs[0]);
  const Tensor& x = *inputs[0];
  const Tensor& dy = *output_grads[0];
  Tensor* dx = input_grads[0];
  const bool any_bf16 = x.dtype() == DType::bf16 || dy.dtype() == DType::bf16 || (dx && dx->dtype() == DType::bf16);
  if (!any_bf16) return backward_cuda_float(ctx, x, dy, dx);
  const Problem problem = problem_of(x);
  if (problem.count == 0) return;
  const auto rp = reparametrization<float>(pedestal(), beta_bound(), gamma_bound());
  if (try_tensor_core_backward(ctx, x, dy, dx, parameter("beta"), parameter("gamma"), problem, rp, inverse_, partials_))
    return;
  const Tensor x_f32 = f32_stand_in(ctx, x, stand_ins_.input);
  const Tensor dy_f32 = f32_stand_in(ctx, dy, stand_ins_.output_grad);
  if (!dx) return backward_cuda_float(ctx, x_f32, dy_f32, nullptr);
  F32Output dx_f32(ctx, *dx, stand_ins_.input_grad);
  backward_cuda_float(ctx, x_f32, dy_f32, &dx_f32.f32());
  dx_f32.store(ctx);
}

void GDN::forward_cuda_float(Context& ctx, const Tensor& x, Tensor& y) {
  const Problem problem = problem_of(x);
  if (problem.count == 0) return;
  const Tensor& beta = parameter("beta").value;
  const Tensor& gamma = parameter("gamma").value;
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const auto rp = reparametrization<T>(pedestal(), beta_bound(), gamma_bound());
    if constexpr (std::is_same_v<T, float>) {
      if (ctx.allow_tf32() && tensor_core_forward(ctx, x, y, beta, gamma, problem, rp, inverse_)) return;
    }
    const bool fused = inverse_ ? try_fused_forward<T, true>(ctx, x, y, beta, gamma, problem, rp)
                                : try_fused_forward<T, false>(ctx, x, y, beta, gamma, problem, rp);
    if (fused) return;
    const Tensor values = effective_parameters<T>(ctx, beta, gamma, problem.channels, rp);
    const T* effective_beta = values.data<T>();
    gdn_general_forward<T><<<cuda::blocks_for(problem.count), kThreads, 0, cuda::stream(ctx)>>>(
        x.data<T>(), y.data<T>(), effective_beta, effective_beta + problem.channels, problem.channels, problem.pixels,
        problem.count, inverse_);
    cuda::check_launch("gdn_general_forward", __FILE__, __LINE__);
  });
}

void GDN::backward_cuda_float(Context& ctx, const Tensor& x, const Tensor& dy, Tensor* dx) {
  const Problem problem = problem_of(x);
  if (problem.count == 0) return;
  Parameter& beta = parameter("beta");
  Parameter& gamma = parameter("gamma");
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const auto rp = reparametrization<T>(pedestal(), beta_bound(), gamma_bound());
    if constexpr (std::is_same_v<T, float>) {
      if (try_tensor_core_backward(ctx, x, dy, dx, beta, gamma, problem, rp, inverse_, partials_)) return;
    }
    const bool fused = inverse_ ? try_fused_backward<T, true>(ctx, x, dy, dx, beta, gamma, problem, rp)
                                : try_fused_backward<T, false>(ctx, x, dy, dx, beta, gamma, problem, rp);
    if (fused) return;
    const int channels = problem.channels;
    const Tensor values = effective_parameters<T>(ctx, beta.value, gamma.value, channels, rp);
    const T* effective_beta = values.data<T>();
    const T* effective_gamma = effective_beta + channels;
    Tensor q(x.shape(), x.dtype(), x.device());
    Tensor x_squared(x.shape(), x.dtype(), x.device());
    const unsigned int blocks = cuda::blocks_for(problem.count);
    gdn_general_norm_gradient<T><<<blocks, kThreads, 0, cuda::stream(ctx)>>>(
        x.data<T>(), dy.data<T>(), q.data<T>(), x_squared.data<T>(), effective_beta, effective_gamma, channels,
        problem.pixels, problem.count, inverse_);
    cuda::check_launch("gdn_general_norm_gradient", __FILE__, __LINE__);
    if (dx) {
      gdn_general_input_gradient<T><<<blocks, kThreads, 0, cuda::stream(ctx)>>>(
          x.data<T>(), dy.data<T>(), q.data<T>(), dx->data<T>(), effective_beta, effective_gamma, channels,
          problem.pixels, problem.count, inverse_);
      cuda::check_launch("gdn_general_input_gradient", __FILE__, __LINE__);
    }
    // sums = [dgamma (C*C, row-major) | dbeta (C)], with respect to the effective values.
    const long long sums_count = static_cast<long long>(channels) * channels + channels;
    Tensor sums({static_cast<std::int64_t>(sums_count)}, x.dtype(), x.device());
    accumulate_gamma_sums<T>(ctx, q.data<T>(), x_squared.data<T>(), problem, sums.data<T>());
    gdn_general_beta_sums<T><<<static_cast<unsigned int>(channels), kThreads, 0, cuda::stream(ctx)>>>(
        q.data<T>(), channels, problem.pixels, problem.total_pixels, sums.data<T>());
    cuda::check_launch("gdn_general_beta_sums", __FILE__, __LINE__);
    launch_parameter_gradients<T>(ctx, sums.data<T>(), 1, channels, beta, gamma, rp);
  });
}

}  // namespace plexus::layers
