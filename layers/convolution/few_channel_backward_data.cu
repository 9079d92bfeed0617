// few_channel_conv::backward_data: X = conv^T(Y, W) + bias when X has at most
// kMaxChannels channels (a ConvTranspose2d's forward onto an RGB image, a
// Conv2d 3->Co's input gradient). In implicit_gemm.h's terms
//   X[n, c, h, w] = bias[c] + sum_{o,i,j} W[o,c,i,j] Y[n, o, (h+p-i)/s, (w+p-j)/s]
//                   (only terms where s divides h+p-i and w+p-j).
// The engine's backward_data (M = Ci rows, N = pixels) would spend 125 of
// every 128 GEMM rows on zeros here, and im2col + cuBLAS writes and re-reads
// a column matrix of Ci*k*k rows per pixel (its GEMM and col2im together
// cost more than this whole kernel).
// This kernel splits the pass the other way round, per block (tiling in
// few_channel_tiling.h):
//   1. Z[m, (c,i,j)] = sum_o Y[n, o, pixel m] W[o, c, i, j] for the pixels m
//      of the region of Y the block's tile of X reads: a GEMM with rows =
//      those pixels (up to 256), columns = Ci*k*k (75 for a 5x5 kernel onto
//      RGB, padded to 80: little waste, unlike the 3 rows padded to 16 of
//      the engine's GEMM), K = Co, on tensor cores (Tf32Product or
//      Bf16Product, as the engine's kernels: BF16 rounds the operands to
//      nearest even as it forms the fragments). K walks the channels in
//      stages of 16 through a 4-deep cp.async ring: a stage holds 16 channel
//      planes of the region ([channel][pixel], a region row contiguous as in
//      Y's NCHW rows; 16-byte copies when the region's columns are aligned
//      chunks, see col_align) and the same 16 rows of W, which are already
//      [o][(c,i,j)]; the A fragments are read straight from the planes.
//   2. X[c, h, w] = bias[c] + the sum of Z[pixel of tap (i, j)][(c, i, j)]
//      over the taps reaching (h, w): a col2im within shared memory (Z
//      replaces the ring there), so the column matrix never leaves the SM
//      and every X element is written once, by one thread, in a fixed order
//      of additions (deterministic; no atomics).
// Neighbouring tiles' regions overlap by about k/s rows and columns of Y,
// which are multiplied again (for 5x5/2 onto 256x256: 12 x 52 tiles, 8 x 32
// region pixels, 1.6x the products of the pass), and read again from L2,
// so DRAM moves one read of Y and one write of X. The pass is faster than
// im2col + cuBLAS at TF32 and BF16 but stays well below DRAM bandwidth with
// neither the tensor cores nor shared memory saturated: it waits on latency
// (each block's prologue and epilogue, 16 warps per multiprocessor).
// Y is f32 or bf16 (Element): a bf16 Y is staged in bf16 (half the bytes of
// the ring's region planes) and widened exactly as the A fragments are read.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>

#include "activation_elements.cuh"
#include "convolution/few_channel_conv.h"
#include "convolution/few_channel_tiling.h"
#include "convolution/implicit_gemm_common.cuh"
#include "plexus/error.h"

namespace plexus::layers::few_channel_conv {

namespace {

using implicit_gemm::detail::allow_shared_bytes;
using implicit_gemm::detail::Bf16Product;
using implicit_gemm::detail::copy16_async_zfill;
using implicit_gemm::detail::copy4_async;
using implicit_gemm::detail::copy8_async_zfill;
using implicit_gemm::detail::kColumnPad;
using implicit_gemm::detail::kThreads;
using implicit_gemm::detail::run_k_pipeline;
using implicit_gemm::detail::Tf32Product;
using implicit_gemm::detail::Tile;

// One Tile per BackwardDataVariant: BM region pixels x BN weight columns,
// 16 channels per stage in a 4-deep ring (three stages of Y in flight while
// one is multiplied; faster than 3-deep for 5x5/2 onto RGB),
// two blocks per multiprocessor (78-90 KiB of shared memory each). Warp
// tiles of 32x32, 32x80 and 32x64 keep the accumulators at 32-80 registers.
using VariantTile0 = Tile<256, 32, 8, 1, 16, 4>;
using VariantTile1 = Tile<256, 80, 8, 1, 16, 4>;
using VariantTile2 = Tile<64, 256, 2, 4, 16, 4>;
static_assert(VariantTile0::BM == kBackwardDataVariants[0].rows &&
                  VariantTile0::BN == kBackwardDataVariants[0].columns &&
                  VariantTile1::BM == kBackwardDataVariants[1].rows &&
                  VariantTile1::BN == kBackwardDataVariants[1].columns &&
                  VariantTile2::BM == kBackwardDataVariants[2].rows &&
                  VariantTile2::BN == kBackwardDataVariants[2].columns && kBackwardDataVariantCount == 3,
              "one tile per variant of few_channel_tiling.h");

struct BackwardDataParams {
  const void* y;        // [images, out_channels, y_h, y_w], float or __nv_bfloat16 elements
  const float* weight;  // [out_channels, channels, kernel, kernel] = [out_channels][columns]
  const float* bias;    // [channels] or null
  float* x;             // [images, channels, x_h, x_w]
  int out_channels, channels, columns;
  int y_h, y_w, x_h, x_w;
  int kernel, stride, padding;
  int tile_h, tile_w, region_h, region_w, row_shift, col_shift, col_align, tiles_w;
};

// Shared memory layout of a Tile, Y's elements of type Element: the ring's
// region planes (STAGES x [BK][BM + pad] elements), then its weight rows
// (STAGES x [BK][BN + pad] floats); the pad of 8 elements puts the fragment
// reads of a warp, rows t and columns g, in 32 different banks (f32: rows
// 8 words apart; bf16: 4 words apart, a row's 8 columns in 4 words). Z
// [BM][BN + 1] floats lies over them after the K loop.
template <class T, class Element>
struct Layout {
  static constexpr int YStride = T::BM + kColumnPad, WStride = T::BN + kColumnPad, ZStride = T::BN + 1;
  static constexpr int YStage = T::BK * YStride, WStage = T::BK * WStride;  // elements, floats
  static constexpr std::size_t YRingBytes = sizeof(Element) * T::STAGES * YStage;
  static constexpr std::size_t RingBytes = YRingBytes + sizeof(float) * T::STAGES * WStage;
  static constexpr std::size_t ZBytes = sizeof(float) * T::BM * ZStride;
  static constexpr std::size_t Bytes = RingBytes > ZBytes ? RingBytes : ZBytes;
  // Region loads: thread tid copies pixels 4q .. 4q+3 (q = tid % ChunkThreads)
  // of channels tid / ChunkThreads + ChannelStep * r, r < ChunksPerThread.
  static constexpr int ChunkThreads = T::BM / 4, ChannelStep = kThreads / ChunkThreads;
  static constexpr int ChunksPerThread = T::BK / ChannelStep;
  static_assert(kThreads % ChunkThreads == 0 && T::BK % ChannelStep == 0, "whole chunks per thread");
  static_assert(YStride % 4 == 0 && YRingBytes % 16 == 0, "aligned chunks and weight rows");
};

// acc += Z-tile products of one stage: A = region planes [k][m] (pixels
// contiguous), B = weight rows [k][n]. m16n8k8 fragments (g = lane/4,
// t = lane%4): a = A(m=g, k=t), A(g+8, t), A(g, t+4), A(g+8, t+4);
// b = B(k=t, n=g), B(k=t+4, n=g); Product::kGroups sets per step.
template <class Product, class T, class Element>
__device__ inline void multiply_stage(const Element* y_tile, const float* w_tile, int warp_m0, int warp_n0, int lane,
                                      float (&acc)[T::MT][T::NT][4]) {
  using L = Layout<T, Element>;
  constexpr int kGroups = Product::kGroups;
  static_assert(T::BK % (8 * kGroups) == 0, "a stage is whole product steps");
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int k_step = 0; k_step < T::BK; k_step += 8 * kGroups) {
    unsigned a[T::MT][kGroups][4];
#pragma unroll
    for (int group = 0; group < kGroups; ++group)
#pragma unroll
      for (int mt = 0; mt < T::MT; ++mt) {
        const Element* p = y_tile + (k_step + 8 * group + t) * L::YStride + warp_m0 + mt * 16 + g;
        a[mt][group][0] = __float_as_uint(load_f32(p));
        a[mt][group][1] = __float_as_uint(load_f32(p + 8));
        a[mt][group][2] = __float_as_uint(load_f32(p + 4 * L::YStride));
        a[mt][group][3] = __float_as_uint(load_f32(p + 4 * L::YStride + 8));
      }
#pragma unroll
    for (int nt = 0; nt < T::NT; ++nt) {
      unsigned b[kGroups][2];
#pragma unroll
      for (int group = 0; group < kGroups; ++group) {
        const float* p = w_tile + (k_step + 8 * group + t) * L::WStride + warp_n0 + nt * 8 + g;
        b[group][0] = __float_as_uint(p[0]);
        b[group][1] = __float_as_uint(p[4 * L::WStride]);
      }
#pragma unroll
      for (int mt = 0; mt < T::MT; ++mt) Product::multiply(acc[mt][nt], a[mt], b);
    }
  }
}

// grid = (tiles of one image, images): one block per tile of X, so a block
// needs no split K and no reduction; 8 warps share its region x weight GEMM.
// chunks: the region's rows are whole aligned chunks of 4 elements of Y
// (col_align 4, Y aligned to 4 elements), copied 16 (f32) or 8 (bf16)
// bytes at a time. Without chunks a bf16 Y is copied element by element
// through registers (cp.async copies at least 4 bytes).
template <class Product, class T, bool chunks, class Element>
__global__ void __launch_bounds__(kThreads, T::BLOCKS) backward_data_kernel(const BackwardDataParams params) {
  using L = Layout<T, Element>;
  extern __shared__ __align__(16) unsigned char shared[];
  Element* y_tiles = reinterpret_cast<Element*>(shared);              // STAGES x [BK][YStride]
  float* w_tiles = reinterpret_cast<float*>(shared + L::YRingBytes);  // STAGES x [BK][WStride]
  float* z = reinterpret_cast<float*>(shared);                        // after the K loop: [BM][ZStride]

  const int tid = threadIdx.x, s = params.stride;
  const int tile_row = blockIdx.x / params.tiles_w, tile_col = blockIdx.x - tile_row * params.tiles_w;
  const int h0 = tile_row * params.tile_h, w0 = tile_col * params.tile_w;  // multiples of s
  const int a0 = h0 / s + params.row_shift;
  const int b0 = (w0 / s + params.col_shift) & -params.col_align;  // rounded down (col_align: 1 or 4)

  // This thread's region pixels and their offsets in a plane of Y (-1: zeros,
  // outside Y or past the region). A chunk lies within one row of the region
  // and of Y when `chunks`, so its first pixel decides.
  constexpr int kPixels = chunks ? 1 : 4;
  const int q = tid % L::ChunkThreads, channel0 = tid / L::ChunkThreads;
  int offsets[kPixels];
#pragma unroll
  for (int u = 0; u < kPixels; ++u) {
    const int m = 4 * q + u;
    const int a = a0 + m / params.region_w, b = b0 + m % params.region_w;
    const bool inside = m < params.region_h * params.region_w && a >= 0 && a < params.y_h && b >= 0 && b < params.y_w;
    offsets[u] = inside ? a * params.y_w + b : -1;
  }

  const long long plane = static_cast<long long>(params.y_h) * params.y_w;
  const Element* y = static_cast<const Element*>(params.y);
  const Element* y_channels = y + (static_cast<long long>(blockIdx.y) * params.out_channels + channel0) * plane;
  auto load_stage = [&](int stage, int k_tile) {
    const int c0 = k_tile * T::BK;
    Element* y_tile = y_tiles + stage * L::YStage + channel0 * L::YStride + 4 * q;
#pragma unroll
    for (int r = 0; r < L::ChunksPerThread; ++r) {
      const int channel = c0 + r * L::ChannelStep;  // relative to channel0
      const bool channel_valid = channel0 + channel < params.out_channels;
      const Element* source = y_channels + channel * plane;
      Element* destination = y_tile + r * L::ChannelStep * L::YStride;
      if constexpr (chunks) {
        const bool valid = channel_valid && offsets[0] >= 0;
        if constexpr (std::is_same_v<Element, float>)
          copy16_async_zfill(destination, valid ? source + offsets[0] : y, valid);
        else copy8_async_zfill(destination, valid ? source + offsets[0] : y, valid);
      } else {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const bool valid = channel_valid && offsets[u] >= 0;
          if constexpr (std::is_same_v<Element, float>)
            copy4_async(destination + u, valid ? source + offsets[u] : y, valid);
          else destination[u] = valid ? source[offsets[u]] : Element(0.0f);
        }
      }
    }
    float* w_tile = w_tiles + stage * L::WStage;
#pragma unroll
    for (int e = tid; e < T::BK * T::BN; e += kThreads) {
      const int kk = e / T::BN, n = e - kk * T::BN;
      const bool valid = n < params.columns && c0 + kk < params.out_channels;
      copy4_async(w_tile + kk * L::WStride + n,
                  valid ? params.weight + static_cast<long long>(c0 + kk) * params.columns + n : params.weight, valid);
    }
  };

  const int warp = tid / 32, lane = tid % 32;
  const int warp_m0 = (warp / T::WARPS_N) * T::WM, warp_n0 = (warp % T::WARPS_N) * T::WN;
  float acc[T::MT][T::NT][4];
  const int k_tiles = (params.out_channels + T::BK - 1) / T::BK;
  run_k_pipeline<T>(k_tiles, acc, load_stage, [&](int stage, float(&sums)[T::MT][T::NT][4]) {
    multiply_stage<Product, T, Element>(y_tiles + stage * L::YStage, w_tiles + stage * L::WStage, warp_m0, warp_n0,
                                        lane, sums);
  });

  __syncthreads();  // every warp is done with the ring that Z replaces
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < T::MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        z[(warp_m0 + mt * 16 + g + 8 * (e >> 1)) * L::ZStride + warp_n0 + nt * 8 + 2 * t + (e & 1)] = acc[mt][nt][e];
  __syncthreads();  // Z is complete

  // X[c, h0 + hh, w0 + ww] sums the taps i = i0 + s*ti, i0 = (hh + p) mod s
  // (h0 is a multiple of s), from region row (hh + p - i)/s - row_shift =
  // rr0 - ti; likewise columns, from region column (ww + p - j)/s + w0/s - b0.
  // One thread per pixel of the tile, all channels.
  const int k = params.kernel, p = params.padding, taps = k * k, channels = params.channels;
  const int col_offset = w0 / s - b0;
  const long long x_plane = static_cast<long long>(params.x_h) * params.x_w;
  float* x_image = params.x + static_cast<long long>(blockIdx.y) * channels * x_plane;
  for (int r = tid; r < params.tile_h * params.tile_w; r += kThreads) {
    const int hh = r / params.tile_w, ww = r - hh * params.tile_w;
    const int h = h0 + hh, w = w0 + ww;
    if (h >= params.x_h || w >= params.x_w) continue;
    const int i0 = (hh + p) % s, j0 = (ww + p) % s;
    const int taps_h = i0 < k ? (k - i0 + s - 1) / s : 0, taps_w = j0 < k ? (k - j0 + s - 1) / s : 0;
    const int rr0 = (hh + p - i0) / s - params.row_shift, cc0 = (ww + p - j0) / s + col_offset;
    const float* z_pixel = z + (rr0 * params.region_w + cc0) * L::ZStride + i0 * k + j0;
    float sums[kMaxChannels];
#pragma unroll
    for (int c = 0; c < kMaxChannels; ++c) sums[c] = params.bias && c < channels ? params.bias[c] : 0.0f;
    for (int ti = 0; ti < taps_h; ++ti)
      for (int tj = 0; tj < taps_w; ++tj) {
        const float* z_tap = z_pixel - (ti * params.region_w + tj) * L::ZStride + s * (ti * k + tj);
#pragma unroll
        for (int c = 0; c < kMaxChannels; ++c)
          if (c < channels) sums[c] += z_tap[c * taps];
      }
    const long long pixel = static_cast<long long>(h) * params.x_w + w;
#pragma unroll
    for (int c = 0; c < kMaxChannels; ++c)
      if (c < channels) x_image[c * x_plane + pixel] = sums[c];
  }
}

// Launches the kernel of tile T at the Context's precision (opting it into
// its shared memory on first use).
template <class Product, class T, bool chunks, class Element>
void launch_kernel(const Context& ctx, const BackwardDataParams& params, dim3 grid) {
  constexpr auto kernel = backward_data_kernel<Product, T, chunks, Element>;
  constexpr std::size_t bytes = Layout<T, Element>::Bytes;
  static const bool opted_in =
      (allow_shared_bytes(kernel, bytes, "cudaFuncSetAttribute(few_channel backward_data_kernel)"), true);
  (void)opted_in;
  kernel<<<grid, kThreads, bytes, cuda::stream(ctx)>>>(params);
  cuda::check_launch("few_channel_conv backward_data_kernel", __FILE__, __LINE__);
}

template <class T, class Element>
void launch(const Context& ctx, const BackwardDataParams& params, dim3 grid, bool chunks) {
  if (ctx.bf16_products()) {
    if (chunks) launch_kernel<Bf16Product, T, true, Element>(ctx, params, grid);
    else launch_kernel<Bf16Product, T, false, Element>(ctx, params, grid);
  } else {
    if (chunks) launch_kernel<Tf32Product, T, true, Element>(ctx, params, grid);
    else launch_kernel<Tf32Product, T, false, Element>(ctx, params, grid);
  }
}

template <class Element>
void launch_variant(const Context& ctx, int variant, const BackwardDataParams& params, dim3 grid, bool chunks) {
  switch (variant) {
    case 0:
      return launch<VariantTile0, Element>(ctx, params, grid, chunks);
    case 1:
      return launch<VariantTile1, Element>(ctx, params, grid, chunks);
    default:
      return launch<VariantTile2, Element>(ctx, params, grid, chunks);
  }
}

}  // namespace

void backward_data(const Context& ctx, const implicit_gemm::ConvProblem& problem, const Tensor& y, const float* weight,
                   const float* bias, float* x) {
  if (problem.batch == 0) return;
  const BackwardDataTiling tiling = backward_data_tiling(problem);
  if (tiling.variant < 0)
    throw Error("few_channel_conv::backward_data: problem not taken (check takes_backward_data first)");
  BackwardDataParams params{};
  params.weight = weight;
  params.bias = bias;
  params.out_channels = static_cast<int>(problem.out_channels);
  params.channels = static_cast<int>(problem.in_channels);
  params.columns = static_cast<int>(problem.in_channels * problem.kernel * problem.kernel);
  params.y_h = static_cast<int>(problem.out_height);
  params.y_w = static_cast<int>(problem.out_width);
  params.x_h = static_cast<int>(problem.height);
  params.x_w = static_cast<int>(problem.width);
  params.kernel = static_cast<int>(problem.kernel);
  params.stride = static_cast<int>(problem.stride);
  params.padding = static_cast<int>(problem.padding);
  params.tile_h = tiling.tile_h;
  params.tile_w = tiling.tile_w;
  params.region_h = tiling.region_h;
  params.region_w = tiling.region_w;
  params.row_shift = tiling.row_shift;
  params.col_shift = tiling.col_shift;
  params.col_align = tiling.col_align;
  params.tiles_w = (params.x_w + tiling.tile_w - 1) / tiling.tile_w;
  const int tiles_h = (params.x_h + tiling.tile_h - 1) / tiling.tile_h;
  // grid.y holds at most 65535 images: larger batches take several launches.
  constexpr long long kImagesPerLaunch = 65535;
  const long long y_image = problem.out_channels * problem.out_height * problem.out_width;
  const long long x_image = problem.in_channels * problem.height * problem.width;
  const bool bf16 = y.dtype() == DType::bf16;
  const std::size_t element_size = dtype_size(y.dtype());
  const auto* y_bytes = static_cast<const unsigned char*>(y.raw_data());
  // Chunks of 4 elements need Y's rows aligned to them: width a multiple of 4 (col_align 4) and y aligned.
  const bool chunks = tiling.col_align == 4 && reinterpret_cast<std::uintptr_t>(y_bytes) % (4 * element_size) == 0;
  for (long long first = 0; first < problem.batch; first += kImagesPerLaunch) {
    const long long images = std::min(kImagesPerLaunch, problem.batch - first);
    params.y = y_bytes + first * y_image * static_cast<long long>(element_size);
    params.x = x + first * x_image;
    const dim3 grid(static_cast<unsigned>(static_cast<long long>(tiles_h) * params.tiles_w),
                    static_cast<unsigned>(images));
    if (bf16) launch_variant<__nv_bfloat16>(ctx, tiling.variant, params, grid, chunks);
    else launch_variant<float>(ctx, tiling.variant, params, grid, chunks);
  }
}

}  // namespace plexus::layers::few_channel_conv
