// NCHW -> NHWC copies and bf16 channel rows (declarations in nhwc_layout.h).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <string>

#include <cuda_bf16.h>

#include "activation_elements.cuh"
#include "convolution/nhwc_layout.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/error.h"

namespace plexus::layers {

namespace {

constexpr int kTile = 32;    // a 32 x 32 tile of (channel, pixel) per block
constexpr int kRowStep = 8;  // 32 x 8 threads: each moves 4 elements of the tile

// One image's [channels][plane] matrix transposed into [plane][channel_stride]
// through a shared tile, so reads (along q) and writes (along c) are both
// coalesced; the +1 column keeps the transposed reads free of bank conflicts.
// grid = (plane tiles, channel_stride tiles, batch).
template <class Source, class Out>
__global__ void nchw_to_nhwc_kernel(const Source* source, int channels, long long plane, int channel_stride,
                                    Out* destination) {
  __shared__ float tile[kTile][kTile + 1];
  const long long image = blockIdx.z;
  const long long q0 = static_cast<long long>(blockIdx.x) * kTile;
  const int c0 = blockIdx.y * kTile;
  const Source* image_source = source + image * channels * plane;
  Out* image_destination = destination + image * plane * channel_stride;
  for (int row = threadIdx.y; row < kTile; row += kRowStep) {
    const int c = c0 + row;
    const long long q = q0 + threadIdx.x;
    tile[row][threadIdx.x] = c < channels && q < plane ? load_f32(image_source + c * plane + q) : 0.0f;
  }
  __syncthreads();
  for (int row = threadIdx.y; row < kTile; row += kRowStep) {
    const long long q = q0 + row;
    const int c = c0 + threadIdx.x;
    if (q < plane && c < channel_stride) store_f32(image_destination + q * channel_stride + c, tile[threadIdx.x][row]);
  }
}

// The bf16 copy with even channel_stride: a [64 channels][32 pixels] tile
// per block, and each thread stores two neighbouring channels of a pixel as
// one 32-bit bf16 pair, so a warp writes one pixel's 64 channels (128 bytes,
// a whole line) per store instead of 64 bytes of 16-bit stores (which kept
// the copy below DRAM bandwidth).
// grid = (plane tiles, channel_stride / 64 tiles, batch).
constexpr int kPairTileChannels = 64;

template <class Source>
__global__ void nchw_to_nhwc_bf16_pairs_kernel(const Source* source, int channels, long long plane, int channel_stride,
                                               std::uint32_t* destination) {
  __shared__ float tile[kPairTileChannels][kTile + 1];
  const long long image = blockIdx.z;
  const long long q0 = static_cast<long long>(blockIdx.x) * kTile;
  const int c0 = blockIdx.y * kPairTileChannels;
  const Source* image_source = source + image * channels * plane;
  std::uint32_t* image_destination = destination + image * plane * (channel_stride / 2);
#pragma unroll
  for (int row = threadIdx.y; row < kPairTileChannels; row += kRowStep) {
    const int c = c0 + row;
    const long long q = q0 + threadIdx.x;
    tile[row][threadIdx.x] = c < channels && q < plane ? load_f32(image_source + c * plane + q) : 0.0f;
  }
  __syncthreads();
  const int c = c0 + 2 * threadIdx.x;  // this thread's channel pair
  for (int row = threadIdx.y; row < kTile; row += kRowStep) {
    const long long q = q0 + row;
    if (q >= plane || c >= channel_stride) continue;
    const __nv_bfloat162 pair = __floats2bfloat162_rn(tile[2 * threadIdx.x][row], tile[2 * threadIdx.x + 1][row]);
    image_destination[(q * channel_stride + c) / 2] = *reinterpret_cast<const std::uint32_t*>(&pair);
  }
}

// The same copy from a bf16 source whose plane is even: each thread reads
// two neighbouring pixels of one channel as one 32-bit word, so a warp reads
// 64 pixels (128 bytes, a whole line) of a channel per load instead of 64
// bytes of 16-bit loads, and the [64 channels][64 pixels] tile stays bf16 in
// shared memory (rows of 33 words: the word stores are conflict-free). The
// values are copied bit for bit, so the result is the one the kernel above
// gives from the same values. grid = (plane / 64 tiles, channel_stride / 64
// tiles, batch).
constexpr int kPairTilePixels = 64;

__global__ void bf16_nchw_to_nhwc_pairs_kernel(const std::uint32_t* source, int channels, long long plane,
                                               int channel_stride, std::uint32_t* destination) {
  __shared__ __align__(4) std::uint16_t tile[kPairTileChannels][kPairTilePixels + 2];
  const long long image = blockIdx.z;
  const long long q0 = static_cast<long long>(blockIdx.x) * kPairTilePixels;
  const int c0 = blockIdx.y * kPairTileChannels;
  const long long pairs_per_row = plane / 2;
  const std::uint32_t* image_source = source + image * channels * pairs_per_row;
  std::uint32_t* image_destination = destination + image * plane * (channel_stride / 2);
  const long long q = q0 + 2 * threadIdx.x;  // this thread's pixel pair (q + 1 < plane when q < plane)
#pragma unroll
  for (int row = threadIdx.y; row < kPairTileChannels; row += kRowStep) {
    const int c = c0 + row;
    *reinterpret_cast<std::uint32_t*>(&tile[row][2 * threadIdx.x]) =
        c < channels && q < plane ? image_source[c * pairs_per_row + q / 2] : 0u;
  }
  __syncthreads();
  const int c = c0 + 2 * threadIdx.x;  // this thread's channel pair
#pragma unroll
  for (int row = threadIdx.y; row < kPairTilePixels; row += kRowStep) {
    const long long pixel = q0 + row;
    if (pixel >= plane || c >= channel_stride) continue;
    image_destination[(pixel * channel_stride + c) / 2] =
        tile[2 * threadIdx.x][row] | static_cast<std::uint32_t>(tile[2 * threadIdx.x + 1][row]) << 16;
  }
}

// grid = (plane / pixel_tile tiles, channel_stride / channel_tile tiles, batch).
dim3 tile_grid(std::int64_t batch, std::int64_t plane, std::int64_t channel_stride, int pixel_tile, int channel_tile) {
  return dim3(static_cast<unsigned>((plane + pixel_tile - 1) / pixel_tile),
              static_cast<unsigned>((channel_stride + channel_tile - 1) / channel_tile), static_cast<unsigned>(batch));
}

template <class Source, class Out>
void copy_to_nhwc(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                  std::int64_t plane, std::int64_t channel_stride, Out* destination) {
  if (channel_stride < channels || channel_stride > (1 << 30) || batch > 65535)
    throw Error("nchw_to_nhwc: unsupported sizes (batch " + std::to_string(batch) + ", channels " +
                std::to_string(channels) + ", channel_stride " + std::to_string(channel_stride) + ")");
  if (batch == 0 || plane == 0 || channel_stride == 0) return;
  const dim3 threads(kTile, kRowStep);
  if constexpr (std::is_same_v<Out, std::uint16_t>) {
    const bool pair_stores = channel_stride % 2 == 0 && reinterpret_cast<std::uintptr_t>(destination) % 4 == 0;
    if constexpr (std::is_same_v<Source, BFloat16>) {
      if (pair_stores && plane % 2 == 0 && reinterpret_cast<std::uintptr_t>(source) % 4 == 0) {
        bf16_nchw_to_nhwc_pairs_kernel<<<tile_grid(batch, plane, channel_stride, kPairTilePixels, kPairTileChannels),
                                         threads, 0, cuda::stream(ctx)>>>(
            reinterpret_cast<const std::uint32_t*>(source), static_cast<int>(channels), plane,
            static_cast<int>(channel_stride), reinterpret_cast<std::uint32_t*>(destination));
        cuda::check_launch("bf16_nchw_to_nhwc_pairs_kernel", __FILE__, __LINE__);
        return;
      }
    }
    if (pair_stores) {
      nchw_to_nhwc_bf16_pairs_kernel<Source>
          <<<tile_grid(batch, plane, channel_stride, kTile, kPairTileChannels), threads, 0, cuda::stream(ctx)>>>(
              source, static_cast<int>(channels), plane, static_cast<int>(channel_stride),
              reinterpret_cast<std::uint32_t*>(destination));
      cuda::check_launch("nchw_to_nhwc_bf16_pairs_kernel", __FILE__, __LINE__);
      return;
    }
  }
  nchw_to_nhwc_kernel<Source, Out>
      <<<tile_grid(batch, plane, channel_stride, kTile, kTile), threads, 0, cuda::stream(ctx)>>>(
          source, static_cast<int>(channels), plane, static_cast<int>(channel_stride), destination);
  cuda::check_launch("nchw_to_nhwc_kernel", __FILE__, __LINE__);
}

// Channel rows: grid = (plane / 1024, channels, images), capped at 65535 in
// y and z (the blocks loop): reads and writes both run along q, coalesced,
// with no division per element; each thread moves 4 pixels 256 apart (four
// independent loads in flight: with one per thread the copy waited on
// latency). Blocks with x = 0 and z = 0 also zero the tail of their rows
// (batch*plane to row_stride).
constexpr int kRowThreads = 256;
constexpr int kRowPixelsPerThread = 4;
constexpr long long kMaxGridYZ = 65535;

template <class Source>
__global__ void nchw_to_channel_rows_bf16_kernel(const Source* source, long long batch, long long channels,
                                                 long long plane, long long row_stride, std::uint16_t* destination) {
  const long long q0 = static_cast<long long>(blockIdx.x) * kRowThreads * kRowPixelsPerThread + threadIdx.x;
  for (long long c = blockIdx.y; c < channels; c += gridDim.y) {
    std::uint16_t* row = destination + c * row_stride;
    for (long long n = blockIdx.z; n < batch; n += gridDim.z) {
      const Source* image_source = source + (n * channels + c) * plane;
      std::uint16_t* image_row = row + n * plane;
      float values[kRowPixelsPerThread];
#pragma unroll
      for (int e = 0; e < kRowPixelsPerThread; ++e) {
        const long long q = q0 + e * kRowThreads;
        values[e] = q < plane ? load_f32(image_source + q) : 0.0f;
      }
#pragma unroll
      for (int e = 0; e < kRowPixelsPerThread; ++e) {
        const long long q = q0 + e * kRowThreads;
        if (q < plane) store_f32(image_row + q, values[e]);
      }
    }
    if (blockIdx.x == 0 && blockIdx.z == 0)
      for (long long k = batch * plane + threadIdx.x; k < row_stride; k += kRowThreads) row[k] = 0;
  }
}

}  // namespace

template <class Source>
void nchw_to_channel_rows_bf16_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                                    std::int64_t plane, std::int64_t row_stride, std::uint16_t* destination) {
  if (batch < 0 || channels < 0 || plane < 0 || row_stride < batch * plane)
    throw Error("nchw_to_channel_rows_bf16: unsupported sizes (batch " + std::to_string(batch) + ", channels " +
                std::to_string(channels) + ", plane " + std::to_string(plane) + ", row_stride " +
                std::to_string(row_stride) + ")");
  if (channels == 0 || row_stride == 0) return;
  constexpr long long kBlockPixels = kRowThreads * kRowPixelsPerThread;
  const long long plane_blocks = std::max<long long>((plane + kBlockPixels - 1) / kBlockPixels, 1);
  const dim3 grid(static_cast<unsigned>(plane_blocks), static_cast<unsigned>(std::min<long long>(channels, kMaxGridYZ)),
                  static_cast<unsigned>(std::clamp<long long>(batch, 1, kMaxGridYZ)));
  nchw_to_channel_rows_bf16_kernel<Source>
      <<<grid, kRowThreads, 0, cuda::stream(ctx)>>>(source, batch, channels, plane, row_stride, destination);
  cuda::check_launch("nchw_to_channel_rows_bf16_kernel", __FILE__, __LINE__);
}

template <class Source>
void nchw_to_nhwc_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                       std::int64_t plane, std::int64_t channel_stride, float* destination) {
  copy_to_nhwc(ctx, source, batch, channels, plane, channel_stride, destination);
}

template <class Source>
void nchw_to_nhwc_bf16_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                            std::int64_t plane, std::int64_t channel_stride, std::uint16_t* destination) {
  copy_to_nhwc(ctx, source, batch, channels, plane, channel_stride, destination);
}

// The two source elements: f32 and bf16 activations.
template void nchw_to_nhwc_cuda<float>(const Context&, const float*, std::int64_t, std::int64_t, std::int64_t,
                                       std::int64_t, float*);
template void nchw_to_nhwc_cuda<BFloat16>(const Context&, const BFloat16*, std::int64_t, std::int64_t, std::int64_t,
                                          std::int64_t, float*);
template void nchw_to_nhwc_bf16_cuda<float>(const Context&, const float*, std::int64_t, std::int64_t, std::int64_t,
                                            std::int64_t, std::uint16_t*);
template void nchw_to_nhwc_bf16_cuda<BFloat16>(const Context&, const BFloat16*, std::int64_t, std::int64_t,
                                               std::int64_t, std::int64_t, std::uint16_t*);
template void nchw_to_channel_rows_bf16_cuda<float>(const Context&, const float*, std::int64_t, std::int64_t,
                                                    std::int64_t, std::int64_t, std::uint16_t*);
template void nchw_to_channel_rows_bf16_cuda<BFloat16>(const Context&, const BFloat16*, std::int64_t, std::int64_t,
                                                       std::int64_t, std::int64_t, std::uint16_t*);

}  // namespace plexus::layers
