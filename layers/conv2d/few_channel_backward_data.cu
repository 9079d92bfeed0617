// few_channel_conv::backward_data: X = conv^T(Y, W) + bias when X has at most
// kMaxChannels channels (a ConvTranspose2d's forward onto an RGB image, a
// Conv2d 3->Co's input gradient). In implicit_gemm.h's terms
//   X[n, c, h, w] = bias[c] + sum_{o,i,j} W[o,c,i,j] Y[n, o, (h+p-i)/s, (w+p-j)/s]
//                   (only terms where s divides h+p-i and w+p-j).
// The engine's backward_data (M = Ci rows, N = pixels) would spend 125 of
// every 128 GEMM rows on zeros here, and im2col + cuBLAS writes and re-reads
// a column matrix of Ci*k*k rows per pixel. This kernel instead splits the
// pass the other way round, per block (tiling in few_channel_tiling.h):
//   1. Z[m, (c,i,j)] = sum_o Y[n, o, pixel m] W[o, c, i, j] for the pixels m
//      of the region of Y the block's tile of X reads: a GEMM with rows =
//      those pixels, columns = Ci*k*k (75 for a 5x5 kernel onto RGB: little
//      padding, unlike the 3 rows padded to 8 or 16 an X-pixel-by-(o, tap)
//      GEMM would give), K = Co, on tensor cores (Tf32Product or
//      Bf16Product, as the engine's kernels: BF16 rounds the operands to
//      nearest even as it forms the fragments). K walks the channels in
//      stages of 32 through a double-buffered cp.async ring: each stage holds
//      32 channel planes of the region ([channel][pixel], the pixels of a row
//      contiguous, as in Y's NCHW rows) and the same 32 rows of W, which are
//      already [o][(c,i,j)].
//   2. X[c, h, w] = bias[c] + the sum of Z[pixel of tap (i, j)][(c, i, j)]
//      over the taps reaching (h, w): a col2im within shared memory (Z
//      replaces the ring there), so the column matrix never leaves the SM
//      and every X element is written once, by one thread, in a fixed order
//      of additions (deterministic; no atomics).
// Neighbouring tiles' regions overlap by about k/s rows and columns of Y,
// which are multiplied again (1.4x the products for 5x5/2 at 16x32 tiles);
// the products are cheap next to the one read of Y the pass is bound by,
// and the second read of an overlap mostly hits L2.
#include <algorithm>

#include "conv2d/few_channel_conv.h"
#include "conv2d/few_channel_tiling.h"
#include "conv2d/implicit_gemm_common.cuh"
#include "plexus/error.h"

namespace plexus::layers::few_channel_conv {

namespace {

using implicit_gemm::detail::allow_shared_bytes;
using implicit_gemm::detail::Bf16Product;
using implicit_gemm::detail::commit_async;
using implicit_gemm::detail::copy4_async;
using implicit_gemm::detail::kColumnPad;
using implicit_gemm::detail::kThreads;
using implicit_gemm::detail::run_k_pipeline;
using implicit_gemm::detail::Tf32Product;
using implicit_gemm::detail::Tile;

// One Tile per BackwardDataVariant: BM region pixels x BN weight columns,
// 32 channels per stage, double-buffered, two blocks per multiprocessor
// (their shared memory, 75-86 KiB each, fits twice). Warp tiles of 32x32,
// 48x40 and 32x64 keep the accumulators at 32-64 registers.
using VariantTile0 = Tile<256, 32, 8, 1, 32, 2>;
using VariantTile1 = Tile<192, 80, 4, 2, 32, 2>;
using VariantTile2 = Tile<64, 256, 2, 4, 32, 2>;
static_assert(VariantTile0::BM == kBackwardDataVariants[0].rows && VariantTile0::BN == kBackwardDataVariants[0].columns &&
                  VariantTile1::BM == kBackwardDataVariants[1].rows &&
                  VariantTile1::BN == kBackwardDataVariants[1].columns &&
                  VariantTile2::BM == kBackwardDataVariants[2].rows &&
                  VariantTile2::BN == kBackwardDataVariants[2].columns && kBackwardDataVariantCount == 3,
              "one tile per variant of few_channel_tiling.h");

struct BackwardDataParams {
  const float* y;       // [images, out_channels, y_h, y_w]
  const float* weight;  // [out_channels, channels, kernel, kernel] = [out_channels][columns]
  const float* bias;    // [channels] or null
  float* x;             // [images, channels, x_h, x_w]
  int out_channels, channels, columns;
  int y_h, y_w, x_h, x_w;
  int kernel, stride, padding;
  int tile_h, tile_w, region_h, region_w, row_shift, col_shift, tiles_w;
};

// Shared memory layout of a Tile (floats): the ring's stages (region planes
// [BK][BM + pad], weight rows [BK][BN + pad]: the pad of 8 words puts the
// fragment reads of a warp, rows t and columns g, in 32 different banks),
// Z [BM][BN + 1] over them after the K loop, then the region's pixel offsets.
template <class T>
struct Layout {
  static constexpr int YStride = T::BM + kColumnPad, WStride = T::BN + kColumnPad, ZStride = T::BN + 1;
  static constexpr int YStage = T::BK * YStride, WStage = T::BK * WStride;
  static constexpr int Ring = T::STAGES * (YStage + WStage), Z = T::BM * ZStride;
  static constexpr int Floats = Ring > Z ? Ring : Z;
  static constexpr std::size_t Bytes = sizeof(float) * Floats + sizeof(int) * T::BM;
};

// acc += Z-tile products of one stage: A = region planes [k][m] (pixels
// contiguous), B = weight rows [k][n]. m16n8k8 fragments (g = lane/4,
// t = lane%4): a = A(m=g, k=t), A(g+8, t), A(g, t+4), A(g+8, t+4);
// b = B(k=t, n=g), B(k=t+4, n=g); Product::kGroups sets per step.
template <class Product, class T>
__device__ inline void multiply_stage(const float* y_tile, const float* w_tile, int warp_m0, int warp_n0, int lane,
                                      float (&acc)[T::MT][T::NT][4]) {
  using L = Layout<T>;
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
        const float* p = y_tile + (k_step + 8 * group + t) * L::YStride + warp_m0 + mt * 16 + g;
        a[mt][group][0] = __float_as_uint(p[0]);
        a[mt][group][1] = __float_as_uint(p[8]);
        a[mt][group][2] = __float_as_uint(p[4 * L::YStride]);
        a[mt][group][3] = __float_as_uint(p[4 * L::YStride + 8]);
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
template <class Product, class T>
__global__ void __launch_bounds__(kThreads, T::BLOCKS) backward_data_kernel(const BackwardDataParams params) {
  using L = Layout<T>;
  extern __shared__ __align__(16) float shared[];
  float* y_tiles = shared;                       // STAGES x [BK][YStride]
  float* w_tiles = shared + T::STAGES * L::YStage;  // STAGES x [BK][WStride]
  float* z = shared;                             // after the K loop: [BM][ZStride]
  int* region_offsets = reinterpret_cast<int*>(shared + L::Floats);  // [BM]: pixel offset in a Y plane, or -1

  const int tid = threadIdx.x, s = params.stride;
  const int tile_row = blockIdx.x / params.tiles_w, tile_col = blockIdx.x - tile_row * params.tiles_w;
  const int h0 = tile_row * params.tile_h, w0 = tile_col * params.tile_w;  // multiples of s
  const int a0 = h0 / s + params.row_shift, b0 = w0 / s + params.col_shift;
  const int region_pixels = params.region_h * params.region_w;
  for (int m = tid; m < T::BM; m += kThreads) {
    int offset = -1;  // outside the region or outside Y: zeros
    if (m < region_pixels) {
      const int a = a0 + m / params.region_w, b = b0 + m % params.region_w;
      if (a >= 0 && a < params.y_h && b >= 0 && b < params.y_w) offset = a * params.y_w + b;
    }
    region_offsets[m] = offset;
  }
  __syncthreads();  // the offsets are complete

  const long long plane = static_cast<long long>(params.y_h) * params.y_w;
  const float* y_image = params.y + static_cast<long long>(blockIdx.y) * params.out_channels * plane;
  auto load_stage = [&](int stage, int k_tile) {
    const int c0 = k_tile * T::BK;
    float* y_tile = y_tiles + stage * L::YStage;
    // Consecutive threads on consecutive pixels: a region row is contiguous in Y.
#pragma unroll
    for (int e = tid; e < T::BK * T::BM; e += kThreads) {
      const int kk = e / T::BM, m = e - kk * T::BM;
      const int offset = region_offsets[m];
      const bool valid = offset >= 0 && c0 + kk < params.out_channels;
      copy4_async(y_tile + kk * L::YStride + m, valid ? y_image + (c0 + kk) * plane + offset : params.y, valid);
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
    multiply_stage<Product, T>(y_tiles + stage * L::YStage, w_tiles + stage * L::WStage, warp_m0, warp_n0, lane,
                               sums);
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

  // X[c, h0 + hh, w0 + ww]: taps i = i0, i0 + s, ... with i0 = (hh + p) mod s
  // (h0 is a multiple of s) read region row (hh + p - i)/s - row_shift.
  const int k = params.kernel, p = params.padding, taps = k * k;
  const int tile_pixels = params.tile_h * params.tile_w;
  const long long x_plane = static_cast<long long>(params.x_h) * params.x_w;
  float* x_image = params.x + static_cast<long long>(blockIdx.y) * params.channels * x_plane;
  for (int e = tid; e < params.channels * tile_pixels; e += kThreads) {
    const int c = e / tile_pixels, r = e - c * tile_pixels;
    const int hh = r / params.tile_w, ww = r - hh * params.tile_w;
    const int h = h0 + hh, w = w0 + ww;
    if (h >= params.x_h || w >= params.x_w) continue;
    float sum = params.bias ? params.bias[c] : 0.0f;
    for (int i = (hh + p) % s; i < k; i += s) {
      const float* z_row = z + ((hh + p - i) / s - params.row_shift) * params.region_w * L::ZStride + c * taps + i * k;
      for (int j = (ww + p) % s; j < k; j += s) sum += z_row[((ww + p - j) / s - params.col_shift) * L::ZStride + j];
    }
    x_image[c * x_plane + static_cast<long long>(h) * params.x_w + w] = sum;
  }
}

// Launches the kernel of tile T at the Context's precision (opting it into its shared memory on first use).
template <class T>
void launch(const Context& ctx, const BackwardDataParams& params, dim3 grid) {
  using L = Layout<T>;
  if (ctx.bf16_products()) {
    static const bool opted_in = (allow_shared_bytes(backward_data_kernel<Bf16Product, T>, L::Bytes,
                                                     "cudaFuncSetAttribute(few_channel backward_data_kernel)"),
                                  true);
    (void)opted_in;
    backward_data_kernel<Bf16Product, T><<<grid, kThreads, L::Bytes, cuda::stream(ctx)>>>(params);
  } else {
    static const bool opted_in = (allow_shared_bytes(backward_data_kernel<Tf32Product, T>, L::Bytes,
                                                     "cudaFuncSetAttribute(few_channel backward_data_kernel)"),
                                  true);
    (void)opted_in;
    backward_data_kernel<Tf32Product, T><<<grid, kThreads, L::Bytes, cuda::stream(ctx)>>>(params);
  }
  cuda::check_launch("few_channel_conv backward_data_kernel", __FILE__, __LINE__);
}

}  // namespace

void backward_data(const Context& ctx, const implicit_gemm::ConvProblem& problem, const float* y,
                   const float* weight, const float* bias, float* x) {
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
  params.tiles_w = (params.x_w + tiling.tile_w - 1) / tiling.tile_w;
  const int tiles_h = (params.x_h + tiling.tile_h - 1) / tiling.tile_h;
  // grid.y holds at most 65535 images: larger batches take several launches.
  constexpr long long kImagesPerLaunch = 65535;
  const long long y_image = problem.out_channels * problem.out_height * problem.out_width;
  const long long x_image = problem.in_channels * problem.height * problem.width;
  for (long long first = 0; first < problem.batch; first += kImagesPerLaunch) {
    const long long images = std::min(kImagesPerLaunch, problem.batch - first);
    params.y = y + first * y_image;
    params.x = x + first * x_image;
    const dim3 grid(static_cast<unsigned>(static_cast<long long>(tiles_h) * params.tiles_w),
                    static_cast<unsigned>(images));
    switch (tiling.variant) {
      case 0: launch<VariantTile0>(ctx, params, grid); break;
      case 1: launch<VariantTile1>(ctx, params, grid); break;
      default: launch<VariantTile2>(ctx, params, grid); break;
    }
  }
}

}  // namespace plexus::layers::few_channel_conv
