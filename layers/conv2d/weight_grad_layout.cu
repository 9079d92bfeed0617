// Operand copies for the Hopper weight gradient (declarations and layouts in weight_grad_layout.h).
#include <string>

#include <cuda_bf16.h>

#include "conv2d/weight_grad_layout.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"
#include "plexus/error.h"

namespace plexus::layers {

namespace {

__device__ inline void store(float* destination, float value) { *destination = value; }
__device__ inline void store(std::uint16_t* destination, float value) {
  *destination = __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

// One block per destination row (blockIdx.x; rows decoded once, no
// division per element), its threads along the row: consecutive threads
// write consecutive w' (coalesced) and read pixels s apart of one input row.
constexpr int kRowThreads = 128;

// Destination rows: (phase, plane, h') with plane = n * channels + c.
template <class Out>
__global__ void phases_kernel(const float* source, int planes, int height, int width, int stride, int phase_height,
                              int row_pitch, Out* destination) {
  const int row = blockIdx.x;
  const int h_phase = row % phase_height, rest = row / phase_height;
  const int plane = rest % planes, phase = rest / planes;
  const int h = stride * h_phase + phase / stride, w0 = phase % stride;
  const float* source_row = source + (static_cast<long long>(plane) * height + h) * width;
  Out* destination_row = destination + static_cast<long long>(row) * row_pitch;
  for (int w_phase = threadIdx.x; w_phase < row_pitch; w_phase += kRowThreads) {
    const int w = stride * w_phase + w0;
    store(destination_row + w_phase, h < height && w < width ? source_row[w] : 0.0f);
  }
}

// Destination rows: (copy, row of Y).
template <class Out>
__global__ void shifted_rows_kernel(const float* source, int rows, int width, int first_shift, int row_pitch,
                                    Out* destination) {
  const int row = blockIdx.x % rows, shift = first_shift + blockIdx.x / rows;
  const float* source_row = source + static_cast<long long>(row) * width;
  Out* destination_row = destination + static_cast<long long>(blockIdx.x) * row_pitch;
  for (int u = threadIdx.x; u < row_pitch; u += kRowThreads) {
    const int w = u - shift;
    store(destination_row + u, w >= 0 && w < width ? source_row[w] : 0.0f);
  }
}

void check_sizes(bool valid, const char* what, std::int64_t height, std::int64_t width, std::int64_t row_pitch) {
  if (!valid)
    throw Error(std::string(what) + ": unsupported sizes (height " + std::to_string(height) + ", width " +
                std::to_string(width) + ", row_pitch " + std::to_string(row_pitch) + ")");
}

template <class Out>
void copy_to_phases(const Context& ctx, const float* source, std::int64_t batch, std::int64_t channels,
                    std::int64_t height, std::int64_t width, int stride, std::int64_t row_pitch, Out* destination) {
  check_sizes(stride >= 1 && stride <= 8 && row_pitch >= (width + stride - 1) / stride && height <= (1 << 30) &&
                  width <= (1 << 30) && row_pitch <= (1 << 30),
              "nchw_to_phases", height, width, row_pitch);
  const std::int64_t phase_height = (height + stride - 1) / stride;
  const long long rows = static_cast<long long>(stride) * stride * batch * channels * phase_height;
  check_sizes(rows < (1LL << 31), "nchw_to_phases", height, width, row_pitch);
  if (rows == 0 || row_pitch == 0) return;
  phases_kernel<Out><<<static_cast<unsigned>(rows), kRowThreads, 0, cuda::stream(ctx)>>>(
      source, static_cast<int>(batch * channels), static_cast<int>(height), static_cast<int>(width), stride,
      static_cast<int>(phase_height), static_cast<int>(row_pitch), destination);
  cuda::check_launch("phases_kernel", __FILE__, __LINE__);
}

template <class Out>
void copy_shifted_rows(const Context& ctx, const float* source, std::int64_t batch, std::int64_t channels,
                       std::int64_t height, std::int64_t width, int first_shift, int copies, std::int64_t row_pitch,
                       Out* destination) {
  check_sizes(copies >= 1 && copies <= 64 && width <= (1 << 30) && row_pitch <= (1 << 30) && first_shift > -(1 << 20) &&
                  first_shift < (1 << 20),
              "shifted_rows", height, width, row_pitch);
  const long long rows = batch * channels * height;
  check_sizes(rows * copies < (1LL << 31), "shifted_rows", height, width, row_pitch);
  if (rows == 0 || row_pitch == 0) return;
  shifted_rows_kernel<Out><<<static_cast<unsigned>(rows * copies), kRowThreads, 0, cuda::stream(ctx)>>>(
      source, static_cast<int>(rows), static_cast<int>(width), first_shift, static_cast<int>(row_pitch), destination);
  cuda::check_launch("shifted_rows_kernel", __FILE__, __LINE__);
}

}  // namespace

void nchw_to_phases_cuda(const Context& ctx, const float* source, std::int64_t batch, std::int64_t channels,
                         std::int64_t height, std::int64_t width, int stride, std::int64_t row_pitch,
                         float* destination) {
  copy_to_phases(ctx, source, batch, channels, height, width, stride, row_pitch, destination);
}

void nchw_to_phases_bf16_cuda(const Context& ctx, const float* source, std::int64_t batch, std::int64_t channels,
                              std::int64_t height, std::int64_t width, int stride, std::int64_t row_pitch,
                              std::uint16_t* destination) {
  copy_to_phases(ctx, source, batch, channels, height, width, stride, row_pitch, destination);
}

void shifted_rows_cuda(const Context& ctx, const float* source, std::int64_t batch, std::int64_t channels,
                       std::int64_t height, std::int64_t width, int first_shift, int copies, std::int64_t row_pitch,
                       float* destination) {
  copy_shifted_rows(ctx, source, batch, channels, height, width, first_shift, copies, row_pitch, destination);
}

void shifted_rows_bf16_cuda(const Context& ctx, const float* source, std::int64_t batch, std::int64_t channels,
                            std::int64_t height, std::int64_t width, int first_shift, int copies,
                            std::int64_t row_pitch, std::uint16_t* destination) {
  copy_shifted_rows(ctx, source, batch, channels, height, width, first_shift, copies, row_pitch, destination);
}

}  // namespace plexus::layers
