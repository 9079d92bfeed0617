#pragma once
// The CUDA side of a Context: its stream and library handles. Include from
// .cu files (and host code built with CUDA) only.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <curand.h>

#include <cstdint>

#include "plexus/context.h"

namespace plexus::cuda {

struct CudaResources {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  curandGenerator_t curand = nullptr;
  void* cublas_workspace = nullptr;  // fixed, so eager and graph-captured GEMMs pick the same kernels
  // The context's seed in device memory (Context::reseed writes it on the
  // stream) and how many draws were handed out since the last reseed.
  std::uint64_t* random_seed = nullptr;
  std::uint64_t random_draws = 0;
  // The stream of cuda::Branch (plexus/cuda/branch.h), made on first use,
  // and its fork and join events. While a Branch runs work, `stream` is
  // branch_stream.
  cudaStream_t branch_stream = nullptr;
  cudaEvent_t branch_fork = nullptr;
  cudaEvent_t branch_join = nullptr;
  bool defer_joins = false;     // inside a Context::DeferredJoins
  bool branch_pending = false;  // branch work the context's stream has not waited for yet
};

// Counter-based random numbers whose seed is read on the device, so a
// captured CUDA graph draws new numbers whenever the context is reseeded
// between replays. Draw i of a request is Philox4x32-10 (cuRAND's
// curand_init(*seed, first + i, 0, &state)), and requests never overlap
// until the next reseed.
struct DeviceRandom {
  const std::uint64_t* seed;  // device pointer
  std::uint64_t first;        // subsequence of this request's draw 0
};
// Reserves `count` draws (one per subsequence) of the context's stream.
DeviceRandom device_random(const Context& ctx, std::uint64_t count);

// Throws DeviceError when ctx is not a CUDA context.
CudaResources& resources(const Context& ctx);
// Whether a cuda::Branch is running work on `resources` (inside Branch::run).
inline bool in_branch(const CudaResources& resources) {
  return resources.branch_stream && resources.stream == resources.branch_stream;
}
// The stream that work of ctx is enqueued on: the context's own, or the
// branch stream inside Branch::run.
inline cudaStream_t stream(const Context& ctx) { return resources(ctx).stream; }
// The library handles stay bound to the context's own stream (and cuBLAS to
// its one workspace), so they refuse to be used inside Branch::run.
cublasHandle_t cublas(const Context& ctx);
curandGenerator_t curand(const Context& ctx);

// Blocks of 256 threads covering n elements (capped; kernels grid-stride).
inline unsigned int blocks_for(long long n, unsigned int threads = 256) {
  long long blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535LL * 32) blocks = 65535LL * 32;
  return static_cast<unsigned int>(blocks);
}

}  // namespace plexus::cuda
