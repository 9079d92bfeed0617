// The implicit-GEMM engine's backward_weight: partial[split][o][(c, i, j)] =
// sum over the split's pixels, reduced in a fixed order (mappings in
// implicit_gemm.h, the shared tiles and products in implicit_gemm_common.cuh).
#include <algorithm>
#include <cstdint>

#include "conv2d/channel_ops.h"
#include "conv2d/implicit_gemm_common.cuh"
#include "conv2d/implicit_gemm_wgmma_weight_grad.h"

namespace plexus::layers::implicit_gemm {

namespace {

using namespace detail;

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

  const int warp = tid / 32, lane = tid % 32;
  const int warp_m0 = (warp / T::WARPS_N) * T::WM, warp_n0 = (warp % T::WARPS_N) * T::WN;

  // load_stage steps its pixel cursor per call, so it ignores the tile index:
  // run_k_pipeline loads the tiles in order.
  float acc[T::MT][T::NT][4];
  run_k_pipeline<T>(
      k_tiles, acc, [&](int stage, int) { load_stage(stage); },
      [&](int stage, float(&sums)[T::MT][T::NT][4]) {
        multiply_stage<Product, T, !tap_major>(a_tiles + stage * a_stage, b_tiles + stage * b_stage, warp_m0,
                                               warp_n0, lane, sums);
      });

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

void backward_weight(const Context& ctx, const ConvProblem& p, const float* x, const float* y,
                     float* weight_grad, Scratch& scratch) {
  if (p.batch * p.out_height * p.out_width == 0) return;
  if (uses_wgmma(ctx) && wgmma_weight_grad_fits(p, ctx.bf16_products())) {
    wgmma_weight_grad(ctx, p, x, y, weight_grad, scratch);
    return;
  }
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
