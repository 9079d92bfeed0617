// few_channel_conv::forward: Conv2d forward when X has few channels (the
// layer reading an RGB image), on the strips of few_channel_strip.cuh:
// M = Co (128 per block), N = the tile's pixels, K = Ci*k*k. The block
// keeps its 128 weight rows in shared memory and loops over tiles, copying
// the next tile's strip while the current one's products run. Y is f32 or
// bf16 (Element): the f32 sums (plus bias) are rounded into a bf16 Y.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>

#include "activation_elements.cuh"
#include "convolution/few_channel_strip.cuh"
#include "fused_activation.cuh"

namespace plexus::layers::few_channel_conv {

namespace {

using namespace strip;

constexpr int kForwardMt = 2;  // 16-row tiles per warp (128 output channels per block)

// Shared memory of the forward kernel: weight rows [kRows][taps_pad + 4]
// (a row stride of 4 mod 16 words keeps ldmatrix conflict-free), two strip
// buffers (the next tile's strip is copied while the current one's products
// run), the tap table.
std::size_t forward_shared_bytes(const StripParams& p) {
  return sizeof(float) * (block_rows(kForwardMt) * (p.taps_pad + 4) + 2 * strip_buffer_size(p)) +
         sizeof(int) * p.taps_pad;
}

// Stores a warp's sums (plus bias) into a bf16 Y whose rows are whole
// 16-byte chunks (Wo % 8 == 0, Y 16-byte aligned): acc[mt][nt] holds rows
// g, g+8 of m16 tile mt and pixels 2t, 2t+1 of n8 tile nt (a bf16 pair, one
// 32-bit word). Stored as pairs, a quad's row would be 16 scattered bytes
// per n8 tile, half of each 32-byte sector; instead the quad transposes its
// 4 x 4 words with shuffles, so that lane t holds n8 tile t's 8 pixels, and
// each lane stores 16 bytes (a quad 64 contiguous bytes of a row).
// row0: the warp's first output channel; b0: its first pixel.
template <int kMt, int kNt>
__device__ inline void store_bf16_rows(const float (&acc)[kMt][kNt][4], const float (&bias_rows)[kMt][2],
                                       __nv_bfloat16* y, const StripParams& p, const Tile& tile, int row0, int b0) {
  static_assert(kNt == 4, "a quad's 4 lanes take one n8 tile each");
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const auto pack = [](float v0, float v1) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(v0, v1);
    return *reinterpret_cast<const unsigned*>(&pair);
  };
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      unsigned words[kNt], mine[kNt] = {};
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt)
        words[nt] = pack(activated(acc[mt][nt][2 * half] + bias_rows[mt][half], p.activate, p.negative_slope),
                         activated(acc[mt][nt][2 * half + 1] + bias_rows[mt][half], p.activate, p.negative_slope));
        // Round k: lane s sends its word of tile (s + k) & 3; lane t receives from lane (t - k) & 3 its word of tile t.
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int send = (t + k) & 3, from = (t - k) & 3;
        const unsigned word = send == 0 ? words[0] : send == 1 ? words[1] : send == 2 ? words[2] : words[3];
        const unsigned received = __shfl_sync(0xffffffffu, word, (lane & ~3) | from);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (j == from) mine[j] = received;
      }
      const int o = row0 + 16 * mt + g + 8 * half, b = b0 + 8 * t;
      if (o < p.out_channels && b < p.out_width) {  // Wo % 8 == 0: the whole chunk lies in the row
        __nv_bfloat16* row =
            y + ((static_cast<long long>(tile.image) * p.out_channels + o) * p.out_height + tile.row) * p.out_width;
        *reinterpret_cast<uint4*>(row + b) = make_uint4(mine[0], mine[1], mine[2], mine[3]);
      }
    }
}

// grid = (blocks looping over pixel tiles, Co / 128): each block loads its
// weight rows once and keeps them for every tile it takes. Warp w computes
// output channels 32*(w%4).. of the block and pixels 32*(w/4).. of the tile.
// S: the stride (p.stride), a constant so fragment reads take immediate offsets.
// Element: Y's elements, float or __nv_bfloat16; rows16: a bf16 Y's rows
// are whole 16-byte chunks (store_bf16_rows). Three blocks per
// multiprocessor fit the shared memory of a 5x5 kernel on 3 channels; the
// bound keeps the registers within them too (80 a thread: unbounded, the
// bf16 output's variant took 96, and two blocks ran 15% slower).
template <class Product, int S, class Element>
__global__ void __launch_bounds__(kThreads, 3)
    few_channel_forward_kernel(const StripParams p, const float* weight, const float* bias, Element* y, bool rows16) {
  constexpr int kMt = kForwardMt, kRows = block_rows(kMt), kGroups = Product::kGroups;
  constexpr int kNt = 4;  // n8 tiles: the warp's 32 pixels
  extern __shared__ __align__(16) float shared[];
  const int w_stride = p.taps_pad + 4;
  float* w_tile = shared;
  float* strips = w_tile + kRows * w_stride;  // two strip buffers (current and next tile)
  int* tap_offsets = reinterpret_cast<int*>(strips + 2 * strip_buffer_size(p));
  const int o0 = blockIdx.y * kRows;
  for (int e = threadIdx.x; e < kRows * p.taps_pad; e += kThreads) {
    const int r = e / p.taps_pad, k = e - r * p.taps_pad;
    const bool real = o0 + r < p.out_channels && k < p.taps;
    w_tile[r * w_stride + k] = real ? weight[static_cast<long long>(o0 + r) * p.taps + k] : 0.f;
  }
  write_tap_table(p, strips, tap_offsets);

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int warp_m0 = 16 * kMt * (warp & 3), warp_n0 = 32 * (warp >> 2);
  float bias_rows[kMt][2];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
    for (int half = 0; half < 2; ++half) {
      const int o = o0 + warp_m0 + 16 * mt + g + 8 * half;
      bias_rows[mt][half] = bias && o < p.out_channels ? bias[o] : 0.f;
    }
  const bool pairs = p.out_width % 2 == 0;  // rows of Y start at even elements: store pairs

  stage_strip(p, tile_at(p, blockIdx.x), strips);  // the grid has at most one block per tile
  commit_async();
  int parity = 0;
  for (int index = blockIdx.x; index < p.tiles; index += gridDim.x, parity ^= 1) {
    const Tile tile = tile_at(p, index);
    const float* strip = strips + parity * strip_buffer_size(p) + (warp_n0 + g) * S;  // this thread's pixel column
    if (index + gridDim.x < p.tiles)
      stage_strip(p, tile_at(p, index + gridDim.x), strips + (parity ^ 1) * strip_buffer_size(p));
    commit_async();
    wait_async<1>();  // this thread's copies of the current strip have landed
    __syncthreads();  // and everyone's (first pass: the weights and the table too)
    float acc[kMt][kNt][4] = {};
    for (int k_step = 0; k_step < p.taps_pad; k_step += 8 * kGroups) {
      unsigned a[kMt][kGroups][4], b[kNt][kGroups][2];
#pragma unroll
      for (int group = 0; group < kGroups; ++group) {
        const int k8 = k_step + 8 * group;
        load_a_fragments(a, group, w_tile, w_stride, warp_m0, k8, lane);
        // B(k, n) = strip[tap_offsets[k] + n*s]: b0 = B(t, g), b1 = B(t+4, g).
        const float* column0 = strip + tap_offsets[k8 + t];
        const float* column1 = strip + tap_offsets[k8 + t + 4];
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          b[nt][group][0] = __float_as_uint(column0[nt * 8 * S]);
          b[nt][group][1] = __float_as_uint(column1[nt * 8 * S]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) Product::multiply(acc[mt][nt], a[mt], b[nt]);
    }
    // acc[mt][nt] holds rows g, g+8 of m16 tile mt and pixels 2t, 2t+1 of n8 tile nt.
    if constexpr (!std::is_same_v<Element, float>) {
      if (rows16) {
        store_bf16_rows<kMt, kNt>(acc, bias_rows, y, p, tile, o0 + warp_m0, tile.b0 + warp_n0);
        __syncthreads();  // every fragment of this strip is read before the next pass refills it
        continue;
      }
    }
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int o = o0 + warp_m0 + 16 * mt + g + 8 * half;
        if (o >= p.out_channels) continue;
        Element* row =
            y + ((static_cast<long long>(tile.image) * p.out_channels + o) * p.out_height + tile.row) * p.out_width;
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          const int b = tile.b0 + warp_n0 + nt * 8 + 2 * t;
          const float v0 = activated(acc[mt][nt][2 * half] + bias_rows[mt][half], p.activate, p.negative_slope);
          const float v1 = activated(acc[mt][nt][2 * half + 1] + bias_rows[mt][half], p.activate, p.negative_slope);
          if (pairs && b + 1 < p.out_width) {
            if constexpr (std::is_same_v<Element, float>) *reinterpret_cast<float2*>(row + b) = make_float2(v0, v1);
            else *reinterpret_cast<__nv_bfloat162*>(row + b) = __floats2bfloat162_rn(v0, v1);
          } else {
            if (b < p.out_width) store_f32(row + b, v0);
            if (b + 1 < p.out_width) store_f32(row + b + 1, v1);
          }
        }
      }
    __syncthreads();  // every fragment of this strip is read before the next pass refills it
  }
}

template <class Product, int S, class Element>
void launch_forward(const Context& ctx, const StripParams& p, const float* weight, const float* bias, Element* y) {
  const auto kernel = few_channel_forward_kernel<Product, S, Element>;
  const std::size_t bytes = forward_shared_bytes(p);
  const long long m_tiles = ceil_div(p.out_channels, block_rows(kForwardMt));
  // One wave of blocks, each looping over tiles with its weight rows loaded once.
  const long long blocks = std::clamp(resident_blocks(ctx, kernel, bytes, "few_channel_forward_kernel") / m_tiles, 1LL,
                                      static_cast<long long>(p.tiles));
  const bool rows16 = p.out_width % 8 == 0 && reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(m_tiles)), kThreads, bytes, cuda::stream(ctx)>>>(
      p, weight, bias, y, rows16);
  cuda::check_launch("few_channel_forward_kernel", __FILE__, __LINE__);
}

}  // namespace

void forward(const Context& ctx, const ConvProblem& problem, const float* x, const float* weight,
             const implicit_gemm::Epilogue& epilogue, Tensor& y) {
  StripParams p = strip_params(problem, x);
  p.activate = epilogue.activation.active;
  p.negative_slope = static_cast<float>(epilogue.activation.negative_slope);
  const float* bias = epilogue.bias;
  if (p.tiles == 0) return;
  with_product_and_stride(ctx, p.stride, [&](auto product, auto stride) {
    if (y.dtype() == DType::bf16)
      launch_forward<decltype(product), stride>(ctx, p, weight, bias, static_cast<__nv_bfloat16*>(y.raw_data()));
    else launch_forward<decltype(product), stride>(ctx, p, weight, bias, y.data<float>());
  });
}

}  // namespace plexus::layers::few_channel_conv
