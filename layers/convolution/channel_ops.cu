// CUDA channel broadcasts and reductions (declarations in channel_ops.h).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "convolution/channel_ops.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::layers {

namespace {

constexpr int kThreads = 256;  // a multiple of the warp size (block_sum relies on it)

long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// The sum of `value` over the block, valid in thread 0. Warp shuffles, then
// one partial per warp through shared memory.
template <typename T>
__device__ T block_sum(T value) {
  __shared__ T warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < kThreads / 32 ? warp_sums[lane] : T(0);
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  return value;
}

// y[n, c, q] += b_c
// grid.y strides over the N*C planes (one bias value per plane, no division
// per element); grid.x and the threads stride over the plane's contiguous q,
// so loads and stores are coalesced.
template <typename T>
__global__ void add_channel_bias_kernel(const T* bias, long long planes, long long channels,
                                        long long plane_size, T* y) {
  for (long long plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const T b = bias[plane % channels];
    T* row = y + plane * plane_size;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < plane_size;
         q += (long long)gridDim.x * blockDim.x)
      row[q] += b;
  }
}

// dL/db_c += sum over n, q of dL/dy[n, c, q]
// grid.x = channel c, grid.y = slices of the plane: each block sums its slice
// of channel c in every image (coalesced), reduces over the block, and adds
// its partial with one atomicAdd (double atomics need sm_60+; we build sm_90).
template <typename T>
__global__ void channel_sums_kernel(const T* dy, long long batch, long long channels, long long plane_size,
                                    T* bias_grad) {
  const long long c = blockIdx.x;
  T sum = T(0);
  for (long long n = 0; n < batch; ++n) {
    const T* row = dy + (n * channels + c) * plane_size;
    for (long long q = blockIdx.y * (long long)blockDim.x + threadIdx.x; q < plane_size;
         q += (long long)gridDim.y * blockDim.x)
      sum += row[q];
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) atomicAdd(bias_grad + c, sum);
}

// The same for f32 planes of whole float4s (then every plane starts 16-byte
// aligned): one 16-byte load per thread and image, four images' loads in
// flight per thread, so the pass runs near the memory bandwidth.
__global__ void channel_sums_vec4_kernel(const float4* dy, long long batch, long long channels, long long plane4,
                                         float* bias_grad) {
  const long long c = blockIdx.x;
  float sum = 0.f;
  for (long long q = blockIdx.y * (long long)blockDim.x + threadIdx.x; q < plane4;
       q += (long long)gridDim.y * blockDim.x) {
#pragma unroll 4
    for (long long n = 0; n < batch; ++n) {
      const float4 v = dy[(n * channels + c) * plane4 + q];
      sum += (v.x + v.y) + (v.z + v.w);
    }
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) atomicAdd(bias_grad + c, sum);
}

// dL/dW_i += sum over n < count of G[n, i]  (per-image weight gradients G)
// One thread per element i, looping over the images: consecutive threads read
// consecutive i, so every load is coalesced; no atomics; grid-stride.
template <typename T>
__global__ void batch_sum_kernel(const T* source, long long count, long long size, T* destination) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < size;
       i += (long long)gridDim.x * blockDim.x) {
    T sum = T(0);
    for (long long n = 0; n < count; ++n) sum += source[n * size + i];
    destination[i] += sum;
  }
}

}  // namespace

template <typename T>
void add_channel_bias_cuda(const Context& ctx, const T* bias, std::int64_t batch, std::int64_t channels,
                           std::int64_t plane_size, T* y) {
  const long long planes = batch * channels;
  if (planes == 0 || plane_size == 0) return;
  const dim3 grid(static_cast<unsigned>(std::min(ceil_div(plane_size, kThreads), 1024LL)),
                  static_cast<unsigned>(std::min(planes, 65535LL)));
  add_channel_bias_kernel<T><<<grid, kThreads, 0, cuda::stream(ctx)>>>(bias, planes, channels, plane_size, y);
  cuda::check_launch("add_channel_bias_kernel", __FILE__, __LINE__);
}

template <typename T>
void accumulate_channel_sums_cuda(const Context& ctx, const T* dy, std::int64_t batch, std::int64_t channels,
                                  std::int64_t plane_size, T* bias_grad) {
  if (batch == 0 || channels == 0 || plane_size == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (plane_size % 4 == 0 && reinterpret_cast<std::uintptr_t>(dy) % 16 == 0) {
      const long long plane4 = plane_size / 4;
      const dim3 grid(static_cast<unsigned>(channels),
                      static_cast<unsigned>(std::min(ceil_div(plane4, kThreads), 256LL)));
      channel_sums_vec4_kernel<<<grid, kThreads, 0, cuda::stream(ctx)>>>(reinterpret_cast<const float4*>(dy), batch,
                                                                         channels, plane4, bias_grad);
      cuda::check_launch("channel_sums_vec4_kernel", __FILE__, __LINE__);
      return;
    }
  }
  const dim3 grid(static_cast<unsigned>(channels),
                  static_cast<unsigned>(std::min(ceil_div(plane_size, kThreads), 256LL)));
  channel_sums_kernel<T>
      <<<grid, kThreads, 0, cuda::stream(ctx)>>>(dy, batch, channels, plane_size, bias_grad);
  cuda::check_launch("channel_sums_kernel", __FILE__, __LINE__);
}

template <typename T>
void accumulate_batch_sum_cuda(const Context& ctx, const T* source, std::int64_t count, std::int64_t size,
                               T* destination) {
  if (size == 0) return;
  batch_sum_kernel<T><<<cuda::blocks_for(size, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
      source, count, size, destination);
  cuda::check_launch("batch_sum_kernel", __FILE__, __LINE__);
}

template void add_channel_bias_cuda<float>(const Context&, const float*, std::int64_t, std::int64_t,
                                           std::int64_t, float*);
template void add_channel_bias_cuda<double>(const Context&, const double*, std::int64_t, std::int64_t,
                                            std::int64_t, double*);
template void accumulate_channel_sums_cuda<float>(const Context&, const float*, std::int64_t, std::int64_t,
                                                  std::int64_t, float*);
template void accumulate_channel_sums_cuda<double>(const Context&, const double*, std::int64_t, std::int64_t,
                                                   std::int64_t, double*);
template void accumulate_batch_sum_cuda<float>(const Context&, const float*, std::int64_t, std::int64_t,
                                               float*);
template void accumulate_batch_sum_cuda<double>(const Context&, const double*, std::int64_t, std::int64_t,
                                                double*);

}  // namespace plexus::layers
