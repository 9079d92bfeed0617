// CUDA channel broadcasts and reductions (declarations in channel_ops.h).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "activation_elements.cuh"
#include "convolution/channel_ops.h"
#include "fused_activation.cuh"
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

// y[n, c, q] = activation(y[n, c, q] + b_c)
// grid.y strides over the N*C planes (one bias value per plane, no division
// per element); grid.x and the threads stride over the plane's contiguous q,
// so loads and stores are coalesced.
template <typename T>
__global__ void add_channel_bias_kernel(const T* bias, bool activate, T negative_slope, long long planes,
                                        long long channels, long long plane_size, T* y) {
  for (long long plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const T b = bias ? bias[plane % channels] : T(0);
    T* row = y + plane * plane_size;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < plane_size;
         q += (long long)gridDim.x * blockDim.x)
      row[q] = activated(row[q] + b, activate, negative_slope);
  }
}

// dL/db_c += sum over n, q of dL/dy[n, c, q]
// grid.x = channel c, grid.y = slices of the plane: each block sums its slice
// of channel c in every image (coalesced), reduces over the block, and adds
// its partial with one atomicAdd (double atomics need sm_60+; we build sm_90).
// A bf16 dy (Source = BFloat16) is widened to the f32 sum exactly.
__device__ inline double load_element(const double* element) { return *element; }
template <typename Source>
__device__ inline float load_element(const Source* element) {
  return load_f32(element);
}

template <typename T, typename Source>
__global__ void channel_sums_kernel(const Source* dy, long long batch, long long channels, long long plane_size,
                                    T* bias_grad) {
  const long long c = blockIdx.x;
  T sum = T(0);
  for (long long n = 0; n < batch; ++n) {
    const Source* row = dy + (n * channels + c) * plane_size;
    for (long long q = blockIdx.y * (long long)blockDim.x + threadIdx.x; q < plane_size;
         q += (long long)gridDim.y * blockDim.x)
      sum += load_element(row + q);
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) atomicAdd(bias_grad + c, sum);
}

// Four consecutive elements of a plane of whole groups of four: one 16-byte
// load of f32, or one 8-byte load of bf16 widened exactly.
__device__ inline float4 load_four(const float* four) { return *reinterpret_cast<const float4*>(four); }
__device__ inline float4 load_four(const BFloat16* four) {
  const uint2 pairs = *reinterpret_cast<const uint2*>(four);
  return make_float4(__uint_as_float(pairs.x << 16), __uint_as_float(pairs.x & 0xffff0000u),
                     __uint_as_float(pairs.y << 16), __uint_as_float(pairs.y & 0xffff0000u));
}

// The same for f32 sums over planes of whole groups of four (then every
// plane starts aligned to a group): one 16-byte (f32) or 8-byte (bf16)
// load per thread and image, four images' loads in flight per thread, so
// the pass runs near the memory bandwidth. f32 and bf16 elements of the
// same values give the same sums: the same additions in the same order.
template <typename Source>
__global__ void channel_sums_vec4_kernel(const Source* dy, long long batch, long long channels, long long plane4,
                                         float* bias_grad) {
  const long long c = blockIdx.x;
  float sum = 0.f;
  for (long long q = blockIdx.y * (long long)blockDim.x + threadIdx.x; q < plane4;
       q += (long long)gridDim.y * blockDim.x) {
#pragma unroll 4
    for (long long n = 0; n < batch; ++n) {
      const float4 v = load_four(dy + ((n * channels + c) * plane4 + q) * 4);
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

// w[n, t] = 0 for first <= t < taps: one thread per zeroed tap, grid-stride.
template <typename T>
__global__ void zero_kernel_taps_kernel(long long kernels, long long taps, long long first, T* w) {
  const long long zeroed = taps - first, count = kernels * zeroed;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x)
    w[i / zeroed * taps + first + i % zeroed] = T(0);
}

template <typename T>
__global__ void copy_kernel_taps_kernel(long long kernels, long long taps, long long first, bool to_compact, T* w,
                                        T* compact) {
  const long long kept = taps - first, count = kernels * kept;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    T& tap = w[i / kept * taps + first + i % kept];
    if (to_compact) compact[i] = tap;
    else tap = compact[i];
  }
}

}  // namespace

template <typename T>
void add_channel_bias_cuda(const Context& ctx, const T* bias, const FusedActivation& activation, std::int64_t batch,
                           std::int64_t channels, std::int64_t plane_size, T* y) {
  const long long planes = batch * channels;
  if (planes == 0 || plane_size == 0 || (!bias && !activation.active)) return;
  const dim3 grid(static_cast<unsigned>(std::min(ceil_div(plane_size, kThreads), 1024LL)),
                  static_cast<unsigned>(std::min(planes, 65535LL)));
  add_channel_bias_kernel<T><<<grid, kThreads, 0, cuda::stream(ctx)>>>(
      bias, activation.active, static_cast<T>(activation.negative_slope), planes, channels, plane_size, y);
  cuda::check_launch("add_channel_bias_kernel", __FILE__, __LINE__);
}

template <typename T, typename Source>
void accumulate_channel_sums_cuda(const Context& ctx, const Source* dy, std::int64_t batch, std::int64_t channels,
                                  std::int64_t plane_size, T* bias_grad) {
  if (batch == 0 || channels == 0 || plane_size == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    // Groups of four aligned to a group in every plane: the same choice for
    // an f32 dy and a bf16 dy at the same element offset.
    if (plane_size % 4 == 0 && reinterpret_cast<std::uintptr_t>(dy) % (4 * sizeof(Source)) == 0) {
      const long long plane4 = plane_size / 4;
      const dim3 grid(static_cast<unsigned>(channels),
                      static_cast<unsigned>(std::min(ceil_div(plane4, kThreads), 256LL)));
      channel_sums_vec4_kernel<Source>
          <<<grid, kThreads, 0, cuda::stream(ctx)>>>(dy, batch, channels, plane4, bias_grad);
      cuda::check_launch("channel_sums_vec4_kernel", __FILE__, __LINE__);
      return;
    }
  }
  const dim3 grid(static_cast<unsigned>(channels),
                  static_cast<unsigned>(std::min(ceil_div(plane_size, kThreads), 256LL)));
  channel_sums_kernel<T, Source><<<grid, kThreads, 0, cuda::stream(ctx)>>>(dy, batch, channels, plane_size, bias_grad);
  cuda::check_launch("channel_sums_kernel", __FILE__, __LINE__);
}

template <typename T>
void accumulate_batch_sum_cuda(const Context& ctx, const T* source, std::int64_t count, std::int64_t size,
                               T* destination) {
  if (size == 0) return;
  batch_sum_kernel<T>
      <<<cuda::blocks_for(size, kThreads), kThreads, 0, cuda::stream(ctx)>>>(source, count, size, destination);
  cuda::check_launch("batch_sum_kernel", __FILE__, __LINE__);
}

template <typename T>
void zero_kernel_taps_cuda(const Context& ctx, std::int64_t kernels, std::int64_t taps, std::int64_t first_zero_tap,
                           T* w) {
  const std::int64_t count = kernels * (taps - first_zero_tap);
  if (count <= 0) return;
  zero_kernel_taps_kernel<T>
      <<<cuda::blocks_for(count, kThreads), kThreads, 0, cuda::stream(ctx)>>>(kernels, taps, first_zero_tap, w);
  cuda::check_launch("zero_kernel_taps_kernel", __FILE__, __LINE__);
}

template <typename T>
void copy_kernel_taps_cuda(const Context& ctx, std::int64_t kernels, std::int64_t taps, std::int64_t first_tap,
                           bool to_compact, T* w, T* compact) {
  const std::int64_t count = kernels * (taps - first_tap);
  if (count <= 0) return;
  copy_kernel_taps_kernel<T><<<cuda::blocks_for(count, kThreads), kThreads, 0, cuda::stream(ctx)>>>(
      kernels, taps, first_tap, to_compact, w, compact);
  cuda::check_launch("copy_kernel_taps_kernel", __FILE__, __LINE__);
}

template void copy_kernel_taps_cuda<float>(const Context&, std::int64_t, std::int64_t, std::int64_t, bool, float*,
                                           float*);
template void copy_kernel_taps_cuda<double>(const Context&, std::int64_t, std::int64_t, std::int64_t, bool, double*,
                                            double*);
template void zero_kernel_taps_cuda<float>(const Context&, std::int64_t, std::int64_t, std::int64_t, float*);
template void zero_kernel_taps_cuda<double>(const Context&, std::int64_t, std::int64_t, std::int64_t, double*);
template void add_channel_bias_cuda<float>(const Context&, const float*, const FusedActivation&, std::int64_t,
                                           std::int64_t, std::int64_t, float*);
template void add_channel_bias_cuda<double>(const Context&, const double*, const FusedActivation&, std::int64_t,
                                            std::int64_t, std::int64_t, double*);
template void accumulate_channel_sums_cuda<float, float>(const Context&, const float*, std::int64_t, std::int64_t,
                                                         std::int64_t, float*);
template void accumulate_channel_sums_cuda<float, BFloat16>(const Context&, const BFloat16*, std::int64_t, std::int64_t,
                                                            std::int64_t, float*);
template void accumulate_channel_sums_cuda<double, double>(const Context&, const double*, std::int64_t, std::int64_t,
                                                           std::int64_t, double*);
template void accumulate_batch_sum_cuda<float>(const Context&, const float*, std::int64_t, std::int64_t, float*);
template void accumulate_batch_sum_cuda<double>(const Context&, const double*, std::int64_t, std::int64_t, double*);

}  // namespace plexus::layers
