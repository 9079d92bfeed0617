#pragma once
// Block-wide reductions for CUDA kernels (include from .cu files only).
namespace plexus::cuda {

// Sum of `value` over the threads of a Threads-wide block, valid in thread 0
// ONLY (other threads return partial sums): warp shuffles, then one shared
// slot per warp summed by the first warp. Every thread of the block must call
// it; Threads is a multiple of 32, <= 1024. Two calls in one kernel share the
// slots: put a __syncthreads() between them.
template <int Threads, typename T>
__device__ T block_sum(T value) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "block size must be whole warps");
  __shared__ T warp_sums[Threads / 32];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < Threads / 32 ? warp_sums[lane] : T(0);
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  return value;
}

}  // namespace plexus::cuda
