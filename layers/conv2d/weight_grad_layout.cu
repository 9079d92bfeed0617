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

// One thread per destination element, grid-stride; consecutive threads write
// consecutive w' (coalesced) and read pixels s apart of one input row.
// planes = batch * channels.
template <class Out>
__global__ void phases_kernel(const float* source, long long planes, int height, int width, int stride,
                              int phase_height, int row_pitch, long long total, Out* destination) {
  for (long long index = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; index < total;
       index += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int w_phase = static_cast<int>(index % row_pitch);
    long long rest = index / row_pitch;
    const int h_phase = static_cast<int>(rest % phase_height);
    rest /= phase_height;
    const long long plane = rest % planes;
    const int phase = static_cast<int>(rest / planes);
    const int h = stride * h_phase + phase / stride, w = stride * w_phase + phase % stride;
    const bool inside = h < height && w < width;
    store(destination + index, inside ? source[(plane * height + h) * static_cast<long long>(width) + w] : 0.0f);
  }
}

// rows = batch * channels * H: the rows of Y, in order.
template <class Out>
__global__ void shifted_rows_kernel(const float* source, long long rows, int width, int first_shift, int row_pitch,
                                    long long total, Out* destination) {
  for (long long index = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; index < total;
       index += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int u = static_cast<int>(index % row_pitch);
    const long long rest = index / row_pitch;
    const long long row = rest % rows;
    const int w = u - first_shift - static_cast<int>(rest / rows);
    const bool inside = w >= 0 && w < width;
    store(destination + index, inside ? source[row * width + w] : 0.0f);
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
  const long long total = static_cast<long long>(stride) * stride * batch * channels * phase_height * row_pitch;
  if (total == 0) return;
  phases_kernel<Out><<<cuda::blocks_for(total), 256, 0, cuda::stream(ctx)>>>(
      source, batch * channels, static_cast<int>(height), static_cast<int>(width), stride,
      static_cast<int>(phase_height), static_cast<int>(row_pitch), total, destination);
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
  const long long total = static_cast<long long>(copies) * rows * row_pitch;
  if (total == 0) return;
  shifted_rows_kernel<Out><<<cuda::blocks_for(total), 256, 0, cuda::stream(ctx)>>>(
      source, rows, static_cast<int>(width), first_shift, static_cast<int>(row_pitch), total, destination);
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
