// Operand copies for the Hopper weight gradient (declarations and layouts in weight_grad_layout.h).
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include <cuda_bf16.h>

#include "activation_elements.cuh"
#include "convolution/weight_grad_layout.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/error.h"

namespace plexus::layers {

namespace {

// Blocks of 32 x 8 threads: a thread takes kPerThread consecutive columns
// of one row group (more loads in flight per thread), a warp 32 x that many,
// grid-stride over the groups (grid.y is at most 65535). Each thread reads
// the source values its columns need from one source row (neighbouring
// addresses: the warp reads a contiguous span once) and writes its columns
// of each of the group's destination rows.
constexpr int kColumns = 32, kRows = 8, kPerThread = 4;

dim3 copy_grid(long long groups, long long row_pitch) {
  return dim3(static_cast<unsigned>((row_pitch + kColumns * kPerThread - 1) / (kColumns * kPerThread)),
              static_cast<unsigned>(std::min<long long>((groups + kRows - 1) / kRows, 65535)));
}

// Whether phases_kernel<S, Source, Out> copies bf16 bits in 16-byte chunks:
// stride 2 from bf16 into bf16 (rounding a bf16 value to bf16 changes
// nothing), source rows of whole 16-byte chunks (a thread's 8 source
// elements, kPerThread columns of both phases) and destination rows of
// whole 8-byte ones.
template <int S, class Source, class Out>
constexpr bool kBf16Chunks =
    S == 2 && kPerThread == 4 && std::is_same_v<Source, BFloat16>&& std::is_same_v<Out, std::uint16_t>;

// Row group (a, plane, h') with plane = n * channels + c: source row
// h = S*h' + a, destination rows (a*S + b, plane, h') for b < S. chunks:
// kBf16Chunks applies and the rows and both tensors are aligned for it.
template <int S, class Source, class Out>
__global__ void phases_kernel(const Source* __restrict__ source, int planes, int height, int width, int phase_height,
                              int row_pitch, int groups, bool chunks, Out* __restrict__ destination) {
  const int w_first = (blockIdx.x * kColumns + threadIdx.x) * kPerThread;
  if (w_first >= row_pitch) return;
  const long long phase_size = static_cast<long long>(planes) * phase_height * row_pitch;
  for (int group = blockIdx.y * kRows + threadIdx.y; group < groups; group += gridDim.y * kRows) {
    const int h_phase = group % phase_height, rest = group / phase_height;
    const int plane = rest % planes, a = rest / planes;
    const int h = S * h_phase + a;
    const Source* source_row = source + (static_cast<long long>(plane) * height + h) * width;
    Out* destination_row = destination + static_cast<long long>(a) * S * phase_size +
                           (static_cast<long long>(plane) * phase_height + h_phase) * row_pitch + w_first;
    if constexpr (kBf16Chunks<S, Source, Out>) {
      if (chunks) {
        // Source elements 2 w_first .. + 7 (all inside the row or all past
        // it: the width is a multiple of 8), as pairs in 32-bit words; the
        // even ones are phase 0's 4 columns, the odd ones phase 1's.
        uint4 pairs = make_uint4(0, 0, 0, 0);
        if (h < height && 2 * w_first < width) pairs = *reinterpret_cast<const uint4*>(source_row + 2 * w_first);
        const uint2 even = make_uint2(__byte_perm(pairs.x, pairs.y, 0x5410), __byte_perm(pairs.z, pairs.w, 0x5410));
        const uint2 odd = make_uint2(__byte_perm(pairs.x, pairs.y, 0x7632), __byte_perm(pairs.z, pairs.w, 0x7632));
        if (w_first + kPerThread <= row_pitch) {  // row_pitch % 4 == 0: a thread's columns lie in the row
          *reinterpret_cast<uint2*>(destination_row) = even;
          *reinterpret_cast<uint2*>(destination_row + phase_size) = odd;
        }
        continue;
      }
    }
    float values[S][kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j)
#pragma unroll
      for (int b = 0; b < S; ++b) {
        const int w = S * (w_first + j) + b;
        values[b][j] = h < height && w < width ? load_f32(source_row + w) : 0.0f;
      }
#pragma unroll
    for (int b = 0; b < S; ++b)
#pragma unroll
      for (int j = 0; j < kPerThread; ++j)
        if (w_first + j < row_pitch) store_f32(destination_row + b * phase_size + j, values[b][j]);
  }
}

// Whether shifted_rows_kernel<Source, Out> copies bf16 bits in 8-byte
// words (4 elements): from bf16 into bf16, with rows of Y and of the
// copies whole words (width and row_pitch multiples of 4, both tensors
// 8-byte aligned), so that a word of Y lies wholly inside its row or wholly
// outside it.
template <class Source, class Out>
constexpr bool kBf16Words = kPerThread == 4 && std::is_same_v<Source, BFloat16>&& std::is_same_v<Out, std::uint16_t>;

// Word `word` of a bf16 row of `width` elements (zeros outside the row) as 64 bits.
__device__ inline unsigned long long row_word(const BFloat16* row, int width, int word) {
  if (word < 0 || 4 * word >= width) return 0;
  return *reinterpret_cast<const unsigned long long*>(row + 4 * word);
}

// Row group = a row of Y; destination rows (copy, that row) for copy < copies.
// words: kBf16Words applies and the rows and both tensors are aligned for it.
template <class Source, class Out>
__global__ void shifted_rows_kernel(const Source* __restrict__ source, int rows, int width, int first_shift, int copies,
                                    int row_pitch, bool words, Out* __restrict__ destination) {
  const int u_first = (blockIdx.x * kColumns + threadIdx.x) * kPerThread;
  if (u_first >= row_pitch) return;
  const long long copy_size = static_cast<long long>(rows) * row_pitch;
  for (int row = blockIdx.y * kRows + threadIdx.y; row < rows; row += gridDim.y * kRows) {
    const Source* source_row = source + static_cast<long long>(row) * width;
    Out* destination_row = destination + static_cast<long long>(row) * row_pitch + u_first;
    if constexpr (kBf16Words<Source, Out>) {
      if (words) {
        // Copy c's 4 columns are Y's elements start .. start + 3 (start =
        // u_first - first_shift - c): the two words holding them, shifted
        // down by start's place in the first (little-endian, 16 bits an element).
        for (int copy = 0; copy < copies; ++copy) {
          const int start = u_first - first_shift - copy;
          const int word = start >= 0 ? start / 4 : -((3 - start) / 4), place = start - 4 * word;
          const unsigned long long low = row_word(source_row, width, word);
          const unsigned long long elements =
              place == 0 ? low : (low >> (16 * place)) | (row_word(source_row, width, word + 1) << (64 - 16 * place));
          *reinterpret_cast<unsigned long long*>(destination_row + copy * copy_size) = elements;
        }
        continue;
      }
    }
    for (int copy = 0; copy < copies; ++copy) {
      float values[kPerThread];
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const int w = u_first + j - first_shift - copy;
        values[j] = w >= 0 && w < width ? load_f32(source_row + w) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kPerThread; ++j)
        if (u_first + j < row_pitch) store_f32(destination_row + copy * copy_size + j, values[j]);
    }
  }
}

template <int S, class Source, class Out>
void launch_phases(const Context& ctx, const Source* source, long long groups, int planes, int height, int width,
                   int phase_height, int row_pitch, Out* destination) {
  const bool chunks = kBf16Chunks<S, Source, Out> && width % 8 == 0 && row_pitch % 4 == 0 &&
                      reinterpret_cast<std::uintptr_t>(source) % 16 == 0 &&
                      reinterpret_cast<std::uintptr_t>(destination) % 8 == 0;
  phases_kernel<S, Source, Out><<<copy_grid(groups, row_pitch), dim3(kColumns, kRows), 0, cuda::stream(ctx)>>>(
      source, planes, height, width, phase_height, row_pitch, static_cast<int>(groups), chunks, destination);
}

[[noreturn]] void unsupported_sizes(const char* copy, const std::string& sizes) {
  throw Error(std::string(copy) + ": unsupported sizes (" + sizes + ")");
}

template <class Source, class Out>
void copy_to_phases(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                    std::int64_t height, std::int64_t width, int stride, std::int64_t row_pitch, Out* destination) {
  const auto sizes = [&] {
    return "batch " + std::to_string(batch) + ", channels " + std::to_string(channels) + ", height " +
           std::to_string(height) + ", width " + std::to_string(width) + ", stride " + std::to_string(stride) +
           ", row_pitch " + std::to_string(row_pitch);
  };
  if (!(stride >= 1 && stride <= 4 && row_pitch >= (width + stride - 1) / stride && height <= (1 << 30) &&
        width <= (1 << 30) && row_pitch <= (1 << 30)))
    unsupported_sizes("nchw_to_phases", sizes());
  const std::int64_t phase_height = (height + stride - 1) / stride;
  const long long groups = static_cast<long long>(stride) * batch * channels * phase_height;
  if (groups * stride >= (1LL << 31)) unsupported_sizes("nchw_to_phases", sizes());
  if (groups == 0 || row_pitch == 0) return;
  const int planes = static_cast<int>(batch * channels), h = static_cast<int>(height), w = static_cast<int>(width);
  const int ph = static_cast<int>(phase_height), pitch = static_cast<int>(row_pitch);
  switch (stride) {  // the stride as a template argument: the per-column loops unroll
    case 1:
      launch_phases<1>(ctx, source, groups, planes, h, w, ph, pitch, destination);
      break;
    case 2:
      launch_phases<2>(ctx, source, groups, planes, h, w, ph, pitch, destination);
      break;
    case 3:
      launch_phases<3>(ctx, source, groups, planes, h, w, ph, pitch, destination);
      break;
    default:
      launch_phases<4>(ctx, source, groups, planes, h, w, ph, pitch, destination);
      break;
  }
  cuda::check_launch("phases_kernel", __FILE__, __LINE__);
}

template <class Source, class Out>
void copy_shifted_rows(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                       std::int64_t height, std::int64_t width, int first_shift, int copies, std::int64_t row_pitch,
                       Out* destination) {
  const auto sizes = [&] {
    return "batch " + std::to_string(batch) + ", channels " + std::to_string(channels) + ", height " +
           std::to_string(height) + ", width " + std::to_string(width) + ", first_shift " +
           std::to_string(first_shift) + ", copies " + std::to_string(copies) + ", row_pitch " +
           std::to_string(row_pitch);
  };
  if (!(copies >= 1 && copies <= 64 && width <= (1 << 30) && row_pitch <= (1 << 30) && first_shift > -(1 << 20) &&
        first_shift < (1 << 20)))
    unsupported_sizes("shifted_rows", sizes());
  const long long rows = batch * channels * height;
  if (rows * copies >= (1LL << 31)) unsupported_sizes("shifted_rows", sizes());
  if (rows == 0 || row_pitch == 0) return;
  const bool words = kBf16Words<Source, Out> && width % 4 == 0 && row_pitch % 4 == 0 &&
                     reinterpret_cast<std::uintptr_t>(source) % 8 == 0 &&
                     reinterpret_cast<std::uintptr_t>(destination) % 8 == 0;
  shifted_rows_kernel<Source, Out><<<copy_grid(rows, row_pitch), dim3(kColumns, kRows), 0, cuda::stream(ctx)>>>(
      source, static_cast<int>(rows), static_cast<int>(width), first_shift, copies, static_cast<int>(row_pitch), words,
      destination);
  cuda::check_launch("shifted_rows_kernel", __FILE__, __LINE__);
}

}  // namespace

template <class Source>
void nchw_to_phases_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                         std::int64_t height, std::int64_t width, int stride, std::int64_t row_pitch,
                         float* destination) {
  copy_to_phases(ctx, source, batch, channels, height, width, stride, row_pitch, destination);
}

template <class Source>
void nchw_to_phases_bf16_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                              std::int64_t height, std::int64_t width, int stride, std::int64_t row_pitch,
                              std::uint16_t* destination) {
  copy_to_phases(ctx, source, batch, channels, height, width, stride, row_pitch, destination);
}

template <class Source>
void shifted_rows_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                       std::int64_t height, std::int64_t width, int first_shift, int copies, std::int64_t row_pitch,
                       float* destination) {
  copy_shifted_rows(ctx, source, batch, channels, height, width, first_shift, copies, row_pitch, destination);
}

template <class Source>
void shifted_rows_bf16_cuda(const Context& ctx, const Source* source, std::int64_t batch, std::int64_t channels,
                            std::int64_t height, std::int64_t width, int first_shift, int copies,
                            std::int64_t row_pitch, std::uint16_t* destination) {
  copy_shifted_rows(ctx, source, batch, channels, height, width, first_shift, copies, row_pitch, destination);
}

// The two source elements: f32 and bf16 activations.
template void nchw_to_phases_cuda<float>(const Context&, const float*, std::int64_t, std::int64_t, std::int64_t,
                                         std::int64_t, int, std::int64_t, float*);
template void nchw_to_phases_cuda<BFloat16>(const Context&, const BFloat16*, std::int64_t, std::int64_t, std::int64_t,
                                            std::int64_t, int, std::int64_t, float*);
template void nchw_to_phases_bf16_cuda<float>(const Context&, const float*, std::int64_t, std::int64_t, std::int64_t,
                                              std::int64_t, int, std::int64_t, std::uint16_t*);
template void nchw_to_phases_bf16_cuda<BFloat16>(const Context&, const BFloat16*, std::int64_t, std::int64_t,
                                                 std::int64_t, std::int64_t, int, std::int64_t, std::uint16_t*);
template void shifted_rows_cuda<float>(const Context&, const float*, std::int64_t, std::int64_t, std::int64_t,
                                       std::int64_t, int, int, std::int64_t, float*);
template void shifted_rows_cuda<BFloat16>(const Context&, const BFloat16*, std::int64_t, std::int64_t, std::int64_t,
                                          std::int64_t, int, int, std::int64_t, float*);
template void shifted_rows_bf16_cuda<float>(const Context&, const float*, std::int64_t, std::int64_t, std::int64_t,
                                            std::int64_t, int, int, std::int64_t, std::uint16_t*);
template void shifted_rows_bf16_cuda<BFloat16>(const Context&, const BFloat16*, std::int64_t, std::int64_t,
                                               std::int64_t, std::int64_t, int, int, std::int64_t, std::uint16_t*);

}  // namespace plexus::layers
