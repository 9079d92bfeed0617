// Stride-phase copies (declarations and layout in phase_layout.h).
#include <string>

#include <cuda_bf16.h>

#include "conv2d/phase_layout.h"
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
template <class Out>
__global__ void nchw_to_phases_kernel(const float* source, long long images, int height, int width, int stride,
                                      int phase_height, int row_pitch, long long total, Out* destination) {
  // images = batch * channels: the planes of X, in order.
  for (long long index = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; index < total;
       index += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int w_phase = static_cast<int>(index % row_pitch);
    long long rest = index / row_pitch;
    const int h_phase = static_cast<int>(rest % phase_height);
    rest /= phase_height;
    const long long image = rest % images;
    const int phase = static_cast<int>(rest / images);
    const int h = stride * h_phase + phase / stride, w = stride * w_phase + phase % stride;
    const bool inside = h < height && w < width;
    store(destination + index,
          inside ? source[(image * height + h) * static_cast<long long>(width) + w] : 0.0f);
  }
}

template <class Out>
void copy_to_phases(const Context& ctx, const float* source, std::int64_t batch, std::int64_t channels,
                    std::int64_t height, std::int64_t width, int stride, std::int64_t row_pitch, Out* destination) {
  const std::int64_t phase_height = stride > 0 ? (height + stride - 1) / stride : 0;
  if (stride < 1 || stride > 8 || row_pitch < (width + stride - 1) / stride || height > (1 << 30) ||
      width > (1 << 30) || row_pitch > (1 << 30))
    throw Error("nchw_to_phases: unsupported sizes (height " + std::to_string(height) + ", width " +
                std::to_string(width) + ", stride " + std::to_string(stride) + ", row_pitch " +
                std::to_string(row_pitch) + ")");
  const long long total = static_cast<long long>(stride) * stride * batch * channels * phase_height * row_pitch;
  if (total == 0) return;
  nchw_to_phases_kernel<Out><<<cuda::blocks_for(total), 256, 0, cuda::stream(ctx)>>>(
      source, batch * channels, static_cast<int>(height), static_cast<int>(width), stride,
      static_cast<int>(phase_height), static_cast<int>(row_pitch), total, destination);
  cuda::check_launch("nchw_to_phases_kernel", __FILE__, __LINE__);
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

}  // namespace plexus::layers
