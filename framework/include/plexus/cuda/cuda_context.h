#pragma once
// The CUDA side of a Context: its stream and library handles. Include from
// .cu files (and host code built with CUDA) only.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <curand.h>

#include "plexus/context.h"

namespace plexus::cuda {

struct CudaResources {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  curandGenerator_t curand = nullptr;
};

// Throws DeviceError when ctx is not a CUDA context.
CudaResources& resources(const Context& ctx);
inline cudaStream_t stream(const Context& ctx) { return resources(ctx).stream; }
inline cublasHandle_t cublas(const Context& ctx) { return resources(ctx).cublas; }
inline curandGenerator_t curand(const Context& ctx) { return resources(ctx).curand; }

// Blocks of 256 threads covering n elements (capped; kernels grid-stride).
inline unsigned int blocks_for(long long n, unsigned int threads = 256) {
  long long blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535LL * 32) blocks = 65535LL * 32;
  return static_cast<unsigned int>(blocks);
}

}  // namespace plexus::cuda
