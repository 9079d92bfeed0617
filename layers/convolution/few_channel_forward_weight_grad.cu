// Conv2d forward and weight gradient when X has few channels (the layer
// reading an RGB image; interface and purpose in few_channel_conv.h):
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
//
// forward: M = Co (128 per block), N = the tile's pixels, K = Ci*k*k. The
// block keeps its 128 weight rows in shared memory and loops over tiles,
// copying the next tile's strip while the current one's products run.
// backward_weight: M = Co (64*MT per block), N = Ci*k*k, K = pixels. Each
// block sums its share of the tiles (dY rows and strip copied one tile
// ahead) into registers, then the partial sums of the blocks are added in a
// fixed order.
// Warps own 16*MT output channels each (4 warps across M, 2 across N): a B
// fragment read from the strip feeds MT products, which keeps the kernels
// within shared-memory bandwidth (with MT = 1 the L1/shared pipe bound the
// forward, well below DRAM bandwidth).
// Y (forward's output, the weight gradient's dY) is f32 or bf16 (Element):
// forward rounds its f32 sums into a bf16 Y; the weight gradient widens a
// bf16 dY into the same f32 rows in shared memory, through registers (the
// next tile's rows are loaded before the current tile's products and stored
// after them), since cp.async copies bytes and cannot widen.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>

#include "activation_elements.cuh"
#include "convolution/few_channel_conv.h"
#include "convolution/implicit_gemm_common.cuh"

namespace plexus::layers::few_channel_conv {

namespace {

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

constexpr int kThreads = 256;   // 8 warps: 4 across the block's output channels x 2
constexpr int kPixels = 64;     // output pixels per tile (one output row segment)
constexpr int kKAlign = 16;     // K (or N) padded to whole BF16 k-steps
constexpr int kForwardMt = 2;   // forward: 16-row tiles per warp (128 output channels per block)
// The weight gradient's n8 tiles per warp, two warps across Ci*k*k columns.
constexpr int kMaxTilesPerWarp = 16;
static_assert(kMaxTaps <= 16 * kMaxTilesPerWarp, "every column has a warp");

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
        words[nt] = pack(acc[mt][nt][2 * half] + bias_rows[mt][half], acc[mt][nt][2 * half + 1] + bias_rows[mt][half]);
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
__global__ void __launch_bounds__(kThreads, 3) few_channel_forward_kernel(const StripParams p, const float* weight,
                                                                         const float* bias, Element* y, bool rows16) {
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
        Element* row = y + ((static_cast<long long>(tile.image) * p.out_channels + o) * p.out_height + tile.row) *
                               p.out_width;
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          const int b = tile.b0 + warp_n0 + nt * 8 + 2 * t;
          const float v0 = acc[mt][nt][2 * half] + bias_rows[mt][half];
          const float v1 = acc[mt][nt][2 * half + 1] + bias_rows[mt][half];
          if (pairs && b + 1 < p.out_width) {
            if constexpr (std::is_same_v<Element, float>)
              *reinterpret_cast<float2*>(row + b) = make_float2(v0, v1);
            else
              *reinterpret_cast<__nv_bfloat162*>(row + b) = __floats2bfloat162_rn(v0, v1);
          } else {
            if (b < p.out_width) store_f32(row + b, v0);
            if (b + 1 < p.out_width) store_f32(row + b + 1, v1);
          }
        }
      }
    __syncthreads();  // every fragment of this strip is read before the next pass refills it
  }
}

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
        chunks[u] = o < p.out_channels && b < p.out_width ? *reinterpret_cast<const uint4*>(at(o, b))
                                                          : make_uint4(0, 0, 0, 0);
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
__global__ void __launch_bounds__(kThreads, 2) few_channel_weight_grad_kernel(const StripParams p, const Element* dy,
                                                                             bool vector, float* partial) {
  constexpr int kRows = block_rows(MT), kGroups = Product::kGroups;
  extern __shared__ __align__(16) float shared[];
  float* dy_tiles = shared;                       // two dY buffers (current and next tile)
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
__global__ void sum_partials_kernel(const float* partial, int splits, int m_tiles, int rows, int out_channels,
                                    int taps, int taps_pad, float* weight_grad) {
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

StripParams strip_params(const ConvProblem& problem, const float* x) {
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
      case 1: return f(product, std::integral_constant<int, 1>{});
      case 2: return f(product, std::integral_constant<int, 2>{});
      case 3: return f(product, std::integral_constant<int, 3>{});
      default: return f(product, std::integral_constant<int, 4>{});
    }
  };
  if (ctx.bf16_products())
    with_stride(Bf16Product{});
  else
    with_stride(Tf32Product{});
}

template <class Product, int S, class Element>
void launch_forward(const Context& ctx, const StripParams& p, const float* weight, const float* bias, Element* y) {
  const auto kernel = few_channel_forward_kernel<Product, S, Element>;
  const std::size_t bytes = forward_shared_bytes(p);
  const long long m_tiles = ceil_div(p.out_channels, block_rows(kForwardMt));
  // One wave of blocks, each looping over tiles with its weight rows loaded once.
  const long long blocks = std::clamp(resident_blocks(ctx, kernel, bytes, "few_channel_forward_kernel") / m_tiles,
                                      1LL, static_cast<long long>(p.tiles));
  const bool rows16 = p.out_width % 8 == 0 && reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(m_tiles)), kThreads, bytes,
           cuda::stream(ctx)>>>(p, weight, bias, y, rows16);
  cuda::check_launch("few_channel_forward_kernel", __FILE__, __LINE__);
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
  const long long splits = std::clamp(
      resident_blocks(ctx, kernel, bytes, "few_channel_weight_grad_kernel") / m_tiles, 1LL,
      static_cast<long long>(p.tiles));
  const long long tile_sums = static_cast<long long>(kRows) * p.taps_pad;
  float* partial =
      grown_scratch(ctx, partial_sums, {splits * m_tiles, tile_sums}, DType::f32).data<float>();
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
  if (needed <= 2)
    run_weight_grad<Product, 2, 2, S, Element>(ctx, p, dy, weight_grad, partial_sums);
  else if (needed <= 5)
    run_weight_grad<Product, 2, 5, S, Element>(ctx, p, dy, weight_grad, partial_sums);
  else
    run_weight_grad<Product, 1, kMaxTilesPerWarp, S, Element>(ctx, p, dy, weight_grad, partial_sums);
}

}  // namespace

void forward(const Context& ctx, const ConvProblem& problem, const float* x, const float* weight, const float* bias,
             Tensor& y) {
  const StripParams p = strip_params(problem, x);
  if (p.tiles == 0) return;
  with_product_and_stride(ctx, p.stride, [&](auto product, auto stride) {
    if (y.dtype() == DType::bf16)
      launch_forward<decltype(product), stride>(ctx, p, weight, bias, static_cast<__nv_bfloat16*>(y.raw_data()));
    else
      launch_forward<decltype(product), stride>(ctx, p, weight, bias, y.data<float>());
  });
}

void backward_weight(const Context& ctx, const ConvProblem& problem, const float* x, const Tensor& y,
                     float* weight_grad, Tensor& partial_sums) {
  const StripParams p = strip_params(problem, x);
  if (p.tiles == 0) return;
  with_product_and_stride(ctx, p.stride, [&](auto product, auto stride) {
    if (y.dtype() == DType::bf16)
      run_weight_grad<decltype(product), stride>(ctx, p, static_cast<const __nv_bfloat16*>(y.raw_data()),
                                                 weight_grad, partial_sums);
    else
      run_weight_grad<decltype(product), stride>(ctx, p, y.data<float>(), weight_grad, partial_sums);
  });
}

}  // namespace plexus::layers::few_channel_conv
