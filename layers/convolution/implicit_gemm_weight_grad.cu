// The implicit-GEMM engine's backward_weight: partial[split][o][(c, i, j)] =
// sum over the split's pixels, reduced in a fixed order (mappings in
// implicit_gemm.h, the shared tiles and products in implicit_gemm_common.cuh).
#include <algorithm>
#include <cstdint>

#include "activation_storage.h"
#include "convolution/channel_ops.h"
#include "convolution/few_channel_conv.h"
#include "convolution/implicit_gemm_bf16.cuh"
#include "convolution/implicit_gemm_common.cuh"
#include "convolution/implicit_gemm_wgmma_weight_grad.h"

namespace plexus::layers::implicit_gemm {

namespace {

using namespace detail;

// The BF16-operand weight gradient's tile: 64 pixels per stage (in bf16 the
// bytes 32 f32 pixels took), 3-deep, two blocks per multiprocessor (2 x 105
// KiB). On the 128->128 rows' backward 64 x 2 and 32 x 4 were as fast, and
// 128x256 tiles (two taps per block, one block per multiprocessor) slower at
// 64 x 3, 64 x 4 and 32 x 4 (lab/bench/wgrad-variants.sh).
using WeightGradBf16Tile = Tile<128, 128, 2, 4, 64, 3>;

struct WeightGradParams {
  const float* x;       // [batch, Ci, H, W] (f32: a bf16 X's stand-in)
  const float* x_nhwc;  // the same, [batch, H*W, Ci] (tap_major only)
  const float* y;       // [batch, Co, Ho, Wo] (f32: a bf16 Y's stand-in)
  // BF16 operands (weight_grad_bf16_kernel only): X as NHWC bf16 [batch, H*W, Ci]
  // and Y as bf16 channel rows [Co][y_row_stride] (pixels of the batch in order, then zeros).
  const std::uint16_t* x_nhwc_bf16;
  const std::uint16_t* y_rows_bf16;
  long long y_row_stride;  // a multiple of the tile's BK, >= k_size
  float* partial;          // [splits][Co][Ci*k*k]
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

// The block's split of C into partial[blockIdx.z]: m16n8 accumulator
// (g, 2t..2t+1) and (g+8, 2t..2t+1) of each of the warp's tiles.
// tap_major: column n = tap*Ci + c is written to dW[o, c, tap] in place.
template <class T, bool tap_major>
__device__ inline void store_partial_sums(const WeightGradParams& params, const float (&acc)[T::MT][T::NT][4], int m0,
                                          int n0, int warp_m0, int warp_n0, int lane) {
  const int m_size = params.out_channels;
  const int kk = params.kernel * params.kernel;
  const int n_size = params.in_channels * kk;
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
          if (n >= n_size) continue;
          const int tap = n / params.in_channels;
          const int index = tap_major ? (n - tap * params.in_channels) * kk + tap : n;
          partial[static_cast<long long>(m) * n_size + index] = acc[mt][nt][2 * half + c];
        }
    }
}

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

  const int warp = tid / 32, lane = tid % 32;
  const int warp_m0 = (warp / T::WARPS_N) * T::WM, warp_n0 = (warp % T::WARPS_N) * T::WN;

  // load_stage steps its pixel cursor per call, so it ignores the tile index:
  // run_k_pipeline loads the tiles in order.
  float acc[T::MT][T::NT][4];
  run_k_pipeline<T>(
      k_tiles, acc, [&](int stage, int) { load_stage(stage); },
      [&](int stage, float(&sums)[T::MT][T::NT][4]) {
        multiply_stage<Product, T, !tap_major>(a_tiles + stage * a_stage, b_tiles + stage * b_stage, warp_m0, warp_n0,
                                               lane, sums);
      });

  store_partial_sums<T, tap_major>(params, acc, m0, n0, warp_m0, warp_n0, lane);
}

// The tap-major weight gradient with BF16 operands in shared memory (Ci a
// multiple of kChannelGroup, bf16 products): the same GEMM and split as the
// tap_major weight_grad_kernel, read from bf16 copies rounded once (Y as
// channel rows, X as NHWC), so a stage holds twice the pixels per byte and
// the fragments come straight from ldmatrix (multiply_stage_bf16).
// grid = (N tiles, M tiles, splits). The block's BN columns are groups of
// kChannelGroup channels, each of one tap (BN = 256 on 128 channels spans two taps).
//   A [BM][AStride]: row o is BK consecutive pixels of Y's channel row o
//     (never straddling an image: the rows run across the batch), 8 bf16 per
//     16-byte copy, consecutive threads along a row (coalesced; rows an odd
//     number of 16-byte units apart, so the stores spread over the banks).
//   B [BK][BStride]: 256/BK threads share a pixel (one bounds check per
//     group) and copy each group's channels of its tap from the NHWC copy, 8
//     per copy, consecutive threads on consecutive channels; zeros outside the
//     image, past the split's pixels (where A may hold the next split's or the
//     rows' zero tail: finite values times zero) and past the last column.
constexpr int kChannelGroup = 128;

template <class T>
__global__ void __launch_bounds__(kThreads, T::BLOCKS) weight_grad_bf16_kernel(const WeightGradParams params) {
  using Stage = Bf16Stage<T>;
  constexpr int kTileK = T::BK;
  const int m_size = params.out_channels;
  const int n_size = params.in_channels * params.kernel * params.kernel;
  const int n0 = blockIdx.x * T::BN, m0 = blockIdx.y * T::BM;
  const long long k_begin = blockIdx.z * params.k_per_split;
  const long long k_end = min(params.k_size, k_begin + params.k_per_split);
  const int k_tiles = k_end > k_begin ? static_cast<int>((k_end - k_begin + kTileK - 1) / kTileK) : 0;
  const int tid = threadIdx.x;

  extern __shared__ __align__(16) std::uint16_t bf16_shared[];
  std::uint16_t* a_tiles = bf16_shared;                             // STAGES x [BM][AStride]
  std::uint16_t* b_tiles = a_tiles + T::STAGES * Stage::AElements;  // STAGES x [BK][BStride]

  constexpr int a_vectors_per_row = kTileK / 8, a_vectors = T::BM * a_vectors_per_row / kThreads;
  static_assert(T::BM * a_vectors_per_row % kThreads == 0, "whole A vectors per thread");
  constexpr int kGroups = T::BN / kChannelGroup, kGroupVectors = kChannelGroup / 8;
  constexpr int threads_per_pixel = kThreads / kTileK;
  constexpr int group_vectors = kGroupVectors / threads_per_pixel;  // per thread
  static_assert(T::BN % kChannelGroup == 0, "whole channel groups per block");
  static_assert(kThreads % kTileK == 0 && kGroupVectors % threads_per_pixel == 0, "whole B vectors per thread");
  const int b_row = tid / threads_per_pixel, b_vector = tid % threads_per_pixel;
  const int plane = params.height * params.width;
  // Each group's tap (ti, tj) and first channel; a group past the last column is never inside.
  int group_tap_i[kGroups], group_tap_j[kGroups], group_channel[kGroups];
#pragma unroll
  for (int h = 0; h < kGroups; ++h) {
    const int n = n0 + h * kChannelGroup;
    const int tap = n / params.in_channels;
    group_channel[h] = n - tap * params.in_channels + 8 * b_vector;
    group_tap_i[h] = n < n_size ? tap / params.kernel : kInvalidTap;
    group_tap_j[h] = tap % params.kernel;
  }
  const int out_plane = params.out_height * params.out_width;
  PixelCursor b_pixel(k_begin + b_row, k_end, out_plane, params.out_width);

  auto load_stage = [&](int stage, int k_tile) {
    std::uint16_t* a_tile = a_tiles + stage * Stage::AElements;
    const std::uint16_t* y_tile = params.y_rows_bf16 + k_begin + static_cast<long long>(k_tile) * kTileK;
#pragma unroll
    for (int v = 0; v < a_vectors; ++v) {
      const int i = tid + v * kThreads;
      const int row = i / a_vectors_per_row, k8 = (i % a_vectors_per_row) * 8;
      const bool valid = m0 + row < m_size;
      copy16_async_zfill(
          a_tile + row * Stage::AStride + k8,
          valid ? y_tile + static_cast<long long>(m0 + row) * params.y_row_stride + k8 : params.y_rows_bf16, valid);
    }
    std::uint16_t* b_tile = b_tiles + stage * Stage::BElements + b_row * Stage::BStride;
    const bool pixel_valid = b_pixel.index < k_end;
#pragma unroll
    for (int h = 0; h < kGroups; ++h) {
      // Source pixel (a*s - p + ti, b*s - p + tj) of the group's tap.
      const int row = b_pixel.a * params.stride - params.padding + group_tap_i[h];
      const int col = b_pixel.b * params.stride - params.padding + group_tap_j[h];
      const bool inside = pixel_valid && static_cast<unsigned>(row) < static_cast<unsigned>(params.height) &&
                          static_cast<unsigned>(col) < static_cast<unsigned>(params.width);
      const std::uint16_t* source =
          inside ? params.x_nhwc_bf16 +
                       (static_cast<long long>(b_pixel.image) * plane + row * params.width + col) * params.in_channels +
                       group_channel[h]
                 : params.x_nhwc_bf16;
#pragma unroll
      for (int j = 0; j < group_vectors; ++j)
        copy16_async_zfill(b_tile + h * kChannelGroup + 8 * (b_vector + j * threads_per_pixel),
                           source + (inside ? 8 * j * threads_per_pixel : 0), inside);
    }
    b_pixel.advance(kTileK, params.out_height, params.out_width);
  };

  const int warp = tid / 32, lane = tid % 32;
  const int warp_m0 = (warp / T::WARPS_N) * T::WM, warp_n0 = (warp % T::WARPS_N) * T::WN;
  float acc[T::MT][T::NT][4];
  run_k_pipeline<T>(k_tiles, acc, load_stage, [&](int stage, float(&sums)[T::MT][T::NT][4]) {
    multiply_stage_bf16<T>(a_tiles + stage * Stage::AElements, b_tiles + stage * Stage::BElements, warp_m0, warp_n0,
                           lane, sums);
  });
  store_partial_sums<T, true>(params, acc, m0, n0, warp_m0, warp_n0, lane);
}

// ---------------------------------------------------------------------------
// Host side.

// A and B rings of weight_grad_kernel (B is N-contiguous when tap_major).
template <class T, bool tap_major>
std::size_t weight_grad_shared_bytes() {
  const std::size_t b_stage = tap_major ? T::BK * (T::BN + kColumnPad) : T::BN * T::KStride;
  return sizeof(float) * T::STAGES * (T::BM * T::KStride + b_stage);
}

// Launches weight_grad_kernel with the given product and loads, on tile T
// (opting it into its shared memory on first use).
template <class Product, class T, bool tap_major>
void launch_weight_grad(const Context& ctx, const WeightGradParams& params, dim3 grid, bool vector_a) {
  const std::size_t bytes = weight_grad_shared_bytes<T, tap_major>();
  static const bool opted_in = (allow_shared_bytes(weight_grad_kernel<Product, T, true, tap_major>, bytes,
                                                   "cudaFuncSetAttribute(weight_grad_kernel)"),
                                allow_shared_bytes(weight_grad_kernel<Product, T, false, tap_major>, bytes,
                                                   "cudaFuncSetAttribute(weight_grad_kernel)"),
                                true);
  (void)opted_in;
  cudaStream_t stream = cuda::stream(ctx);
  if (vector_a) weight_grad_kernel<Product, T, true, tap_major><<<grid, kThreads, bytes, stream>>>(params);
  else weight_grad_kernel<Product, T, false, tap_major><<<grid, kThreads, bytes, stream>>>(params);
  cuda::check_launch("weight_grad_kernel", __FILE__, __LINE__);
}

// Launches weight_grad_bf16_kernel on tile T (opting it into its shared memory on first use).
template <class T>
void launch_weight_grad_bf16(const Context& ctx, const WeightGradParams& params, dim3 grid) {
  constexpr std::size_t bytes = sizeof(std::uint16_t) * T::STAGES * (Bf16Stage<T>::AElements + Bf16Stage<T>::BElements);
  static const bool opted_in =
      (allow_shared_bytes(weight_grad_bf16_kernel<T>, bytes, "cudaFuncSetAttribute(weight_grad_bf16_kernel)"), true);
  (void)opted_in;
  weight_grad_bf16_kernel<T><<<grid, kThreads, bytes, cuda::stream(ctx)>>>(params);
  cuda::check_launch("weight_grad_bf16_kernel", __FILE__, __LINE__);
}

// backward_weight on tile T: splits the pixel sum (params.k_size,
// k_per_split, partial), calls launch(grid), and adds the partial sums to
// weight_grad.
template <class T, class Launch>
void run_weight_grad(const Context& ctx, const ConvProblem& p, WeightGradParams& params, float* weight_grad,
                     Tensor& partial_sums, Launch&& launch) {
  constexpr int kTileK = T::BK;
  const long long k_size = p.batch * p.out_height * p.out_width;
  const long long m_size = p.out_channels, n_size = p.in_channels * p.kernel * p.kernel;
  const long long tiles = ceil_div(m_size, T::BM) * ceil_div(n_size, T::BN);
  const long long k_tiles = ceil_div(k_size, kTileK);
  const long long splits = k_splits(ctx, T::BLOCKS, tiles, k_tiles);
  const long long k_per_split = ceil_div(k_tiles, splits) * kTileK;
  const long long used_splits = ceil_div(k_size, k_per_split);

  float* partial = grown_scratch(ctx, partial_sums, {used_splits, m_size * n_size}, DType::f32).data<float>();
  params.partial = partial;
  params.k_size = k_size;
  params.k_per_split = k_per_split;
  const dim3 grid(static_cast<unsigned>(ceil_div(n_size, T::BN)), static_cast<unsigned>(ceil_div(m_size, T::BM)),
                  static_cast<unsigned>(used_splits));
  launch(grid);
  accumulate_batch_sum_cuda(ctx, partial, used_splits, m_size * n_size, weight_grad);
}

// backward_weight from f32 tiles (TF32 products, or BF16 rounded as the
// fragments are formed). tap_major reads params.x_nhwc.
template <class T, bool tap_major>
void run_weight_grad_f32(const Context& ctx, const ConvProblem& p, WeightGradParams& params, float* weight_grad,
                         Tensor& partial_sums) {
  const bool vector_a = (p.out_height * p.out_width) % T::BK == 0;
  run_weight_grad<T>(ctx, p, params, weight_grad, partial_sums, [&](dim3 grid) {
    if (ctx.bf16_products()) launch_weight_grad<Bf16Product, T, tap_major>(ctx, params, grid, vector_a);
    else launch_weight_grad<Tf32Product, T, tap_major>(ctx, params, grid, vector_a);
  });
}

}  // namespace

void backward_weight(Context& ctx, const ConvProblem& p, const Tensor& x, const Tensor& y, float* weight_grad,
                     Scratch& scratch, const KeptSource* kept) {
  if (p.batch * p.out_height * p.out_width == 0) return;
  // The kernels that read NCHW x or y element by element take f32 stand-ins
  // of bf16 ones; the copies into tap-major layouts read bf16 natively.
  if (few_channel_conv::takes_backward_weight(p)) {  // reads y in its own dtype
    const Tensor x_f32 = f32_stand_in(ctx, x, scratch.weight_x_f32);
    few_channel_conv::backward_weight(ctx, p, x_f32.data<float>(), y, weight_grad, scratch.weight_sums);
    return;
  }
  if (uses_wgmma(ctx) && wgmma_weight_grad_fits(p, ctx.bf16_products())) {
    wgmma_weight_grad(ctx, p, x, y, weight_grad, scratch, kept && kept->holds(x) ? kept : nullptr);
    return;
  }
  WeightGradParams params{};
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
    params.x = f32_stand_in(ctx, x, scratch.weight_x_f32).data<float>();
    params.y = f32_stand_in(ctx, y, scratch.weight_y_f32).data<float>();
    run_weight_grad_f32<WeightGradTile, false>(ctx, p, params, weight_grad, scratch.weight_sums);
    return;
  }
  if (ctx.bf16_products()) {
    // BF16 operands: x as NHWC bf16 and y as bf16 channel rows, rounded once
    // here on every call (x and y may differ between calls).
    using T = WeightGradBf16Tile;
    static_assert(kChannelGroup == WeightGradNhwcTile::BN, "the same Ci take the tap-major path at both precisions");
    params.y_row_stride = round_up(p.batch * p.out_height * p.out_width, T::BK);
    std::uint16_t* rows = bf16_scratch(ctx, scratch.weight_rows_bf16, p.out_channels * params.y_row_stride);
    dispatch_activation(y, [&](const auto* elements) {
      nchw_to_channel_rows_bf16_cuda(ctx, elements, p.batch, p.out_channels, p.out_height * p.out_width,
                                     params.y_row_stride, rows);
    });
    params.y_rows_bf16 = rows;
    params.x_nhwc_bf16 = dispatch_activation(x, [&](const auto* elements) {
      return nhwc_source_bf16(ctx, elements, p.batch, p.in_channels, p.height, p.width, static_cast<int>(p.in_channels),
                              scratch.weight_source_bf16);
    });
    run_weight_grad<T>(ctx, p, params, weight_grad, scratch.weight_sums,
                       [&](dim3 grid) { launch_weight_grad_bf16<T>(ctx, params, grid); });
    return;
  }
  // Tap-major: B from an NHWC copy of x, made here on every call (x may
  // differ between calls); A read from y in NCHW.
  params.x_nhwc = dispatch_activation(x, [&](const auto* elements) {
    return nhwc_source(ctx, elements, p.batch, p.in_channels, p.height, p.width, static_cast<int>(p.in_channels),
                       scratch.weight_source);
  });
  params.y = f32_stand_in(ctx, y, scratch.weight_y_f32).data<float>();
  run_weight_grad_f32<WeightGradNhwcTile, true>(ctx, p, params, weight_grad, scratch.weight_sums);
}

}  // namespace plexus::layers::implicit_gemm
