#pragma once
// The strips of the few-channel forward and weight gradient
// (few_channel_forward.cu, few_channel_weight_grad.cu; interface and purpose
// in few_channel_conv.h). In Conv2d terms, X with few channels:
//   forward          Y[n, o, a, b] = bias[o] + sum_{c,i,j} W[o, c, i, j] X[n, c, a*s-p+i, b*s-p+j]
//   backward_weight  dW[o, c, i, j] += sum_{n,a,b} dY[n, o, a, b] X[n, c, a*s-p+i, b*s-p+j]
// Both walk tiles of 64 output pixels of one output row (n, a, b0..b0+63).
// For a tile, every X value any of its taps reads lies in a strip of Ci*k
// input rows by 63*s+k columns (about 8 KB for Ci = 3, k = 5, s = 2), which
// the block stages in shared memory, zeros outside the image. The patch
// matrix entry for column (c, i, j) and pixel b is then
// strip[(c*k + i)*strip_w + (b - b0)*s + j], so mma fragments are read from
// the strip through a table of per-(c, i, j) offsets: no patch matrix, no
// per-element gather from global memory. K (= Ci*k*k) is padded to whole
// BF16 k-steps; padded entries point at a zero run after the strip.
// Warps own 16*MT output channels each (4 warps across M, 2 across N): a B
// fragment read from the strip feeds MT products, which keeps the kernels
// within shared-memory bandwidth (with MT = 1 the L1/shared pipe bound the
// forward, well below DRAM bandwidth).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "convolution/few_channel_conv.h"
#include "convolution/implicit_gemm_common.cuh"

namespace plexus::layers::few_channel_conv::strip {

using implicit_gemm::ConvProblem;
using implicit_gemm::detail::Bf16Product;
using implicit_gemm::detail::ceil_div;
using implicit_gemm::detail::commit_async;
using implicit_gemm::detail::copy16_async_zfill;
using implicit_gemm::detail::copy4_async;
using implicit_gemm::detail::load_matrix_x4;
using implicit_gemm::detail::multiprocessor_count;
using implicit_gemm::detail::round_up;
using implicit_gemm::detail::Tf32Product;
using implicit_gemm::detail::wait_async;

constexpr int kThreads = 256;  // 8 warps: 4 across the block's output channels x 2
constexpr int kPixels = 64;    // output pixels per tile (one output row segment)
constexpr int kKAlign = 16;    // K (or N) padded to whole BF16 k-steps

// Output channels per block with MT 16-row tiles per warp.
__host__ __device__ constexpr int block_rows(int mt) { return 4 * 16 * mt; }

// Problem geometry shared by both kernels.
struct StripParams {
  const float* x;
  int in_channels, height, width;
  int out_channels, out_height, out_width;
  int kernel, stride, padding;
  int taps;           // Ci*k*k
  int taps_pad;       // taps rounded up to kKAlign
  int strip_w;        // (kPixels - 1)*s + k
  int tiles_per_row;  // ceil(Wo / kPixels)
  int tiles;          // batch * Ho * tiles_per_row (fits an int: implicit_gemm::supports)
  bool activate;      // forward: the fused activation after the bias (fused_activation.cuh)
  float negative_slope;
};

struct Tile {
  int image, row, b0;
};

__device__ inline Tile tile_at(const StripParams& p, int index) {
  Tile t;
  t.b0 = index % p.tiles_per_row * kPixels;
  const int rest = index / p.tiles_per_row;
  t.row = rest % p.out_height;
  t.image = rest / p.out_height;
  return t;
}

__device__ __host__ inline int strip_size(const StripParams& p) { return p.in_channels * p.kernel * p.strip_w; }
// A strip buffer: the strip, then a run of zeros that padded taps point at
// (every pixel of a tile reads within kPixels*s of a tap's offset).
__device__ __host__ inline int strip_buffer_size(const StripParams& p) { return strip_size(p) + kPixels * p.stride; }

// tap_offsets[k] = offset in a strip of tap k = (c, i, j): (c*k + i)*strip_w + j,
// or the zero run for padded k; zeroes the zero runs of both strip buffers.
// The strip buffers lie back to back from `strips`.
__device__ inline void write_tap_table(const StripParams& p, float* strips, int* tap_offsets) {
  const int kk = p.kernel * p.kernel;
  for (int e = threadIdx.x; e < kPixels * p.stride; e += kThreads)
    strips[strip_size(p) + e] = strips[strip_buffer_size(p) + strip_size(p) + e] = 0.f;
  for (int k = threadIdx.x; k < p.taps_pad; k += kThreads) {
    int offset = strip_size(p);
    if (k < p.taps) {
      const int c = k / kk, tap = k - c * kk, i = tap / p.kernel, j = tap - i * p.kernel;
      offset = (c * p.kernel + i) * p.strip_w + j;
    }
    tap_offsets[k] = offset;
  }
}

// Queues strip[(c*k + i)*strip_w + col] = X[n, c, a*s-p+i, b0*s-p+col]
// (0 outside the image) as 4-byte asynchronous copies: warp w copies lines
// w, w+8, ..., its lanes neighbouring columns (coalesced reads).
__device__ inline void stage_strip(const StripParams& p, const Tile& t, float* strip) {
  const int row0 = t.row * p.stride - p.padding, col0 = t.b0 * p.stride - p.padding;
  const float* image = p.x + static_cast<long long>(t.image) * p.in_channels * p.height * p.width;
  const int lane = threadIdx.x & 31, lines = p.in_channels * p.kernel;
  for (int line = threadIdx.x >> 5; line < lines; line += kThreads / 32) {
    const int c = line / p.kernel, h = row0 + line - c * p.kernel;
    const bool row_inside = static_cast<unsigned>(h) < static_cast<unsigned>(p.height);
    const float* source = image + (static_cast<long long>(c) * p.height + (row_inside ? h : 0)) * p.width;
    for (int col = lane; col < p.strip_w; col += 32) {
      const int w = col0 + col;
      const bool inside = row_inside && static_cast<unsigned>(w) < static_cast<unsigned>(p.width);
      copy4_async(strip + line * p.strip_w + col, inside ? source + w : p.x, inside);
    }
  }
}

// a[mt][group] = the A fragments of m16 tile mt (rows row0 + 16mt..) at k8,
// from a K-contiguous tile [rows][stride] by ldmatrix (lane addresses as in
// multiply_stage, implicit_gemm_common.cuh).
template <int MT, int kGroups>
__device__ inline void load_a_fragments(unsigned (&a)[MT][kGroups][4], int group, const float* tile, int stride,
                                        int row0, int k8, int lane) {
  const int quad = lane >> 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    load_matrix_x4(a[mt][group], tile + (row0 + 16 * mt + (lane & 7) + 8 * (quad & 1)) * stride + k8 + 4 * (quad >> 1));
}

inline StripParams strip_params(const ConvProblem& problem, const float* x) {
  StripParams p{};
  p.x = x;
  p.in_channels = static_cast<int>(problem.in_channels);
  p.height = static_cast<int>(problem.height);
  p.width = static_cast<int>(problem.width);
  p.out_channels = static_cast<int>(problem.out_channels);
  p.out_height = static_cast<int>(problem.out_height);
  p.out_width = static_cast<int>(problem.out_width);
  p.kernel = static_cast<int>(problem.kernel);
  p.stride = static_cast<int>(problem.stride);
  p.padding = static_cast<int>(problem.padding);
  p.taps = p.in_channels * p.kernel * p.kernel;
  p.taps_pad = static_cast<int>(round_up(p.taps, kKAlign));
  p.strip_w = (kPixels - 1) * p.stride + p.kernel;
  p.tiles_per_row = static_cast<int>(ceil_div(p.out_width, kPixels));
  p.tiles = static_cast<int>(problem.batch * problem.out_height * p.tiles_per_row);
  return p;
}

// How many blocks of `kernel` (opted into `bytes` of shared memory) the GPU
// holds at once.
template <typename Kernel>
long long resident_blocks(const Context& ctx, Kernel kernel, std::size_t bytes, const char* name) {
  implicit_gemm::detail::allow_shared_bytes(kernel, bytes, name);
  int per_multiprocessor = 0;
  cuda::check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, kThreads, bytes), name,
                   __FILE__, __LINE__);
  return static_cast<long long>(std::max(per_multiprocessor, 1)) * multiprocessor_count(ctx);
}

// Calls f(product, std::integral_constant<int, S>) with the Context's tensor-core
// product (Bf16Product or Tf32Product) and S = stride (1 to 4, implicit_gemm::supports).
template <typename F>
void with_product_and_stride(const Context& ctx, int stride, F&& f) {
  auto with_stride = [&](auto product) {
    switch (stride) {
      case 1:
        return f(product, std::integral_constant<int, 1>{});
      case 2:
        return f(product, std::integral_constant<int, 2>{});
      case 3:
        return f(product, std::integral_constant<int, 3>{});
      default:
        return f(product, std::integral_constant<int, 4>{});
    }
  };
  if (ctx.bf16_products()) with_stride(Bf16Product{});
  else with_stride(Tf32Product{});
}

}  // namespace plexus::layers::few_channel_conv::strip
