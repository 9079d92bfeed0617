// few_channel_conv::backward_weight: the Conv2d weight gradient when X has
// few channels (the layer reading an RGB image, or a ConvTranspose2d onto
// one), on the strips of few_channel_strip.cuh: M = Co (64*MT per block),
// N = Ci*k*k, K = pixels. Each block sums its share of the tiles (dY rows
// and strip copied one tile ahead) into registers, then the partial sums of
// the blocks are added in a fixed order. dY is f32 or bf16 (Element): a
// bf16 dY is widened into the same f32 rows in shared memory, through
// registers (the next tile's rows are loaded before the current tile's
// products and stored after them), since cp.async copies bytes and cannot
// widen.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>

#include "activation_elements.cuh"
#include "convolution/few_channel_strip.cuh"

namespace plexus::layers::few_channel_conv {

namespace {

using namespace strip;

// The weight gradient's n8 tiles per warp, two warps across Ci*k*k columns.
constexpr int kMaxTilesPerWarp = 16;
static_assert(kMaxTaps <= 16 * kMaxTilesPerWarp, "every column has a warp");

// Shared memory of the weight-gradient kernel: two buffers (current and
// next tile) of dY rows [rows][kPixels + 4] (ldmatrix-friendly stride, as
// above) and of strips, then the tap table.
constexpr int kDyStride = kPixels + 4;
std::size_t weight_grad_shared_bytes(const StripParams& p, int rows) {
  return sizeof(float) * 2 * (rows * kDyStride + strip_buffer_size(p)) + sizeof(int) * p.taps_pad;
}

// The dY rows of a tile in shared memory: rows o0.., pixels b0..b0+63 of
// output row a, f32, [kRows][kDyStride] (zeros past Wo or Co). load() fills
// them for f32 dY (as cp.async copies: 16-byte when `vector`, i.e. rows are
// whole 16-byte chunks, else 4-byte) and for bf16 dY without `vector`
// (element by element, widened); for bf16 dY with `vector` (Wo % 8 == 0,
// dY 16-byte aligned) it loads each of this thread's 16-byte chunks (8
// pixels) into registers, and store() widens them into the rows.
template <int kRows, class Element>
struct DyRows {
  static constexpr int kChunks = kRows * kPixels / (8 * kThreads);  // bf16 chunks per thread
  static_assert(kRows * kPixels % (8 * kThreads) == 0, "whole bf16 chunks per thread");
  uint4 chunks[kChunks];

  __device__ void load(const StripParams& p, const Tile& t, const Element* dy, int o0, float* rows, bool vector) {
    const long long row_base = static_cast<long long>(t.image) * p.out_channels;
    const auto at = [&](int o, int b) { return dy + ((row_base + o) * p.out_height + t.row) * p.out_width + b; };
    if constexpr (std::is_same_v<Element, float>) {
      if (vector) {
        for (int e = threadIdx.x; e < kRows * kPixels / 4; e += kThreads) {
          const int r = e / (kPixels / 4), q = 4 * (e - r * (kPixels / 4)), o = o0 + r, b = t.b0 + q;
          const bool real = o < p.out_channels && b < p.out_width;
          copy16_async_zfill(rows + r * kDyStride + q, real ? at(o, b) : dy, real);
        }
      } else {
        for (int e = threadIdx.x; e < kRows * kPixels; e += kThreads) {
          const int r = e / kPixels, q = e - r * kPixels, o = o0 + r, b = t.b0 + q;
          const bool real = o < p.out_channels && b < p.out_width;
          copy4_async(rows + r * kDyStride + q, real ? at(o, b) : dy, real);
        }
      }
    } else if (vector) {
#pragma unroll
      for (int u = 0; u < kChunks; ++u) {
        const int e = threadIdx.x + u * kThreads;
        const int r = e / (kPixels / 8), o = o0 + r, b = t.b0 + 8 * (e - r * (kPixels / 8));
        chunks[u] =
            o < p.out_channels && b < p.out_width ? *reinterpret_cast<const uint4*>(at(o, b)) : make_uint4(0, 0, 0, 0);
      }
    } else {
      for (int e = threadIdx.x; e < kRows * kPixels; e += kThreads) {
        const int r = e / kPixels, q = e - r * kPixels, o = o0 + r, b = t.b0 + q;
        rows[r * kDyStride + q] = o < p.out_channels && b < p.out_width ? load_f32(at(o, b)) : 0.f;
      }
    }
  }

  __device__ void store(float* rows, bool vector) const {
    if constexpr (!std::is_same_v<Element, float>) {
      if (!vector) return;
      // A bf16 value is the upper half of its f32; the lower half of a word is the first element.
      const auto first = [](unsigned w) { return __uint_as_float(w << 16); };
      const auto second = [](unsigned w) { return __uint_as_float(w & 0xffff0000u); };
#pragma unroll
      for (int u = 0; u < kChunks; ++u) {
        const int e = threadIdx.x + u * kThreads;
        const int r = e / (kPixels / 8), q = 8 * (e - r * (kPixels / 8));
        float4* row = reinterpret_cast<float4*>(rows + r * kDyStride + q);
        const uint4 c = chunks[u];
        row[0] = make_float4(first(c.x), second(c.x), first(c.y), second(c.y));
        row[1] = make_float4(first(c.z), second(c.z), first(c.w), second(c.w));
      }
    }
  }
};

// grid = (splits, Co / (64*MT)): block (split, m) sums tiles split, split +
// splits, ... of the pixel sum for output channels 64*MT*m.. and writes its
// partial sums [64*MT][taps_pad] to partial + (split * Co_tiles + m) *
// 64*MT * taps_pad. Warp w computes channels 16*MT*(w%4).. and the columns
// (c, i, j) of its half: NT n8 tiles from NT*8*(w/4). Element: dY's
// elements (float or __nv_bfloat16); vector: see DyRows. Two blocks per
// multiprocessor fit the shared memory up to a 9x9 kernel on 3 channels; the
// bound keeps the registers within them (128 a thread: a bf16 dY's chunks in
// registers took the 9x9 variant to 134, one block).
template <class Product, int MT, int NT, int S, class Element>
__global__ void __launch_bounds__(kThreads, 2)
    few_channel_weight_grad_kernel(const StripParams p, const Element* dy, bool vector, float* partial) {
  constexpr int kRows = block_rows(MT), kGroups = Product::kGroups;
  extern __shared__ __align__(16) float shared[];
  float* dy_tiles = shared;                        // two dY buffers (current and next tile)
  float* strips = shared + 2 * kRows * kDyStride;  // two strip buffers
  int* tap_offsets = reinterpret_cast<int*>(strips + 2 * strip_buffer_size(p));
  const int o0 = blockIdx.y * kRows;
  write_tap_table(p, strips, tap_offsets);
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int warp_m0 = 16 * MT * (warp & 3), warp_n0 = NT * 8 * (warp >> 2);
  // This thread's B entries (pixel t, columns (c, i, j) = warp_n0 + 8nt + g)
  // as strip offsets; pixel t + k is k*S further.
  int column_offsets[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int column = warp_n0 + nt * 8 + g;
    column_offsets[nt] = (column < p.taps_pad ? tap_offsets[column] : strip_size(p)) + t * S;
  }
  float acc[MT][NT][4] = {};
  DyRows<kRows, Element> dy_rows;
  const auto stage = [&](int index, int buffer) {
    const Tile tile = tile_at(p, index);
    stage_strip(p, tile, strips + buffer * strip_buffer_size(p));
    dy_rows.load(p, tile, dy, o0, dy_tiles + buffer * kRows * kDyStride, vector);
  };
  stage(blockIdx.x, 0);  // the grid has at most one block per tile
  dy_rows.store(dy_tiles, vector);
  commit_async();
  int parity = 0;
  for (int index = blockIdx.x; index < p.tiles; index += gridDim.x, parity ^= 1) {
    const bool next = index + gridDim.x < p.tiles;
    if (next) stage(index + gridDim.x, parity ^ 1);  // the other buffer: read last in the previous pass
    commit_async();
    wait_async<1>();  // this thread's copies of the current tile have landed
    __syncthreads();  // and everyone's
    const float* strip = strips + parity * strip_buffer_size(p);
    const float* dy_tile = dy_tiles + parity * kRows * kDyStride;
#pragma unroll 2
    for (int k_step = 0; k_step < kPixels; k_step += 8 * kGroups) {
      unsigned a[MT][kGroups][4], b[NT][kGroups][2];
#pragma unroll
      for (int group = 0; group < kGroups; ++group) {
        const int k8 = k_step + 8 * group;
        load_a_fragments(a, group, dy_tile, kDyStride, warp_m0, k8, lane);
        // B(k = pixel, n = column) = strip[column offset + pixel*S]: pixels k8 + t, k8 + t + 4.
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          b[nt][group][0] = __float_as_uint(strip[column_offsets[nt] + k8 * S]);
          b[nt][group][1] = __float_as_uint(strip[column_offsets[nt] + (k8 + 4) * S]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) Product::multiply(acc[mt][nt], a[mt], b[nt]);
    }
    if (next) dy_rows.store(dy_tiles + (parity ^ 1) * kRows * kDyStride, vector);
    __syncthreads();  // every fragment of this buffer is read before the next pass refills it
  }
  // acc[mt][nt]: rows g, g+8 of m16 tile mt, columns 2t, 2t+1 of n8 tile nt.
  float* sums = partial + (static_cast<long long>(blockIdx.x) * gridDim.y + blockIdx.y) * kRows * p.taps_pad;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int column = warp_n0 + nt * 8 + 2 * t;
      if (column >= p.taps_pad) continue;
#pragma unroll
      for (int half = 0; half < 2; ++half)
        *reinterpret_cast<float2*>(sums + (warp_m0 + 16 * mt + g + 8 * half) * p.taps_pad + column) =
            make_float2(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
    }
}

// weight_grad[o, k] += sum over splits (in order) of the partial sums.
// Block: 32 consecutive (o, k) of one Co tile; warp w adds splits w, w+8, ...,
// then warp 0 adds the 8 warp sums in order (deterministic, coalesced).
__global__ void sum_partials_kernel(const float* partial, int splits, int m_tiles, int rows, int out_channels, int taps,
                                    int taps_pad, float* weight_grad) {
  __shared__ float warp_sums[kThreads / 32][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long element = static_cast<long long>(blockIdx.x) * 32 + lane;  // over m_tiles * rows * taps_pad
  const long long tile_size = static_cast<long long>(rows) * taps_pad;
  const bool real = element < m_tiles * tile_size;
  const int m = real ? static_cast<int>(element / tile_size) : 0;
  const long long within = element - m * tile_size;
  float sum = 0.f;
  if (real)
    for (int split = warp; split < splits; split += kThreads / 32)
      sum += partial[(static_cast<long long>(split) * m_tiles + m) * tile_size + within];
  warp_sums[warp][lane] = sum;
  __syncthreads();
  if (warp != 0 || !real) return;
  for (int w = 1; w < kThreads / 32; ++w) sum += warp_sums[w][lane];
  const int o = m * rows + static_cast<int>(within / taps_pad), k = static_cast<int>(within % taps_pad);
  if (o < out_channels && k < taps) weight_grad[static_cast<long long>(o) * taps + k] += sum;
}

// backward_weight with MT m16 and NT n8 tiles per warp (4 x 2 warps): one
// wave of blocks splits the pixel sum (block `split` takes tiles split,
// split + splits, ..., so neighbouring tiles, which share strip rows in L2,
// run at the same time), then their partial sums are added in order.
template <class Product, int MT, int NT, int S, class Element>
void run_weight_grad(const Context& ctx, const StripParams& p, const Element* dy, float* weight_grad,
                     Tensor& partial_sums) {
  const auto kernel = few_channel_weight_grad_kernel<Product, MT, NT, S, Element>;
  constexpr int kRows = block_rows(MT);
  const std::size_t bytes = weight_grad_shared_bytes(p, kRows);
  const int m_tiles = static_cast<int>(ceil_div(p.out_channels, kRows));
  const long long splits = std::clamp(resident_blocks(ctx, kernel, bytes, "few_channel_weight_grad_kernel") / m_tiles,
                                      1LL, static_cast<long long>(p.tiles));
  const long long tile_sums = static_cast<long long>(kRows) * p.taps_pad;
  float* partial = grown_scratch(ctx, partial_sums, {splits * m_tiles, tile_sums}, DType::f32).data<float>();
  cudaStream_t stream = cuda::stream(ctx);
  // Rows of whole 16-byte chunks: 4 f32 or 8 bf16 pixels; bf16 chunks are loaded as uint4, so dY aligned too.
  const bool vector = std::is_same_v<Element, float>
                          ? p.out_width % 4 == 0
                          : p.out_width % 8 == 0 && reinterpret_cast<std::uintptr_t>(dy) % 16 == 0;
  kernel<<<dim3(static_cast<unsigned>(splits), static_cast<unsigned>(m_tiles)), kThreads, bytes, stream>>>(
      p, dy, vector, partial);
  cuda::check_launch("few_channel_weight_grad_kernel", __FILE__, __LINE__);
  sum_partials_kernel<<<static_cast<unsigned>(ceil_div(m_tiles * tile_sums, 32)), kThreads, 0, stream>>>(
      partial, static_cast<int>(splits), m_tiles, kRows, p.out_channels, p.taps, p.taps_pad, weight_grad);
  cuda::check_launch("sum_partials_kernel", __FILE__, __LINE__);
}

template <class Product, int S, class Element>
void run_weight_grad(const Context& ctx, const StripParams& p, const Element* dy, float* weight_grad,
                     Tensor& partial_sums) {
  // n8 tiles per warp: two warps cover taps_pad columns (27 taps: 2; 75: 5;
  // up to 256: 16, then one m16 tile per warp keeps the accumulators in registers).
  const long long needed = ceil_div(p.taps_pad, 16);
  if (needed <= 2) run_weight_grad<Product, 2, 2, S, Element>(ctx, p, dy, weight_grad, partial_sums);
  else if (needed <= 5) run_weight_grad<Product, 2, 5, S, Element>(ctx, p, dy, weight_grad, partial_sums);
  else run_weight_grad<Product, 1, kMaxTilesPerWarp, S, Element>(ctx, p, dy, weight_grad, partial_sums);
}

}  // namespace

void backward_weight(const Context& ctx, const ConvProblem& problem, const float* x, const Tensor& y,
                     float* weight_grad, Tensor& partial_sums) {
  const StripParams p = strip_params(problem, x);
  if (p.tiles == 0) return;
  with_product_and_stride(ctx, p.stride, [&](auto product, auto stride) {
    if (y.dtype() == DType::bf16)
      run_weight_grad<decltype(product), stride>(ctx, p, static_cast<const __nv_bfloat16*>(y.raw_data()), weight_grad,
                                                 partial_sums);
    else run_weight_grad<decltype(product), stride>(ctx, p, y.data<float>(), weight_grad, partial_sums);
  });
}

}  // namespace plexus::layers::few_channel_conv
