#pragma once
// Overlapped launches (programmatic dependent launch, compute capability
// 9.0 and later): a kernel launched with launch_overlapped may be scheduled
// while the kernel before it on the stream is still running its last blocks,
// so its launch and block dispatch hide behind that kernel's tail instead
// of following it. Such a kernel must begin with
//   cuda::wait_for_previous_grid();   // the kernel before it has finished and
//   its writes are visible cuda::let_next_grid_launch();     // the kernel
//   after it may now be scheduled
// before its first access to global memory, and before any early return
// (a grid that returned without waiting could complete before its own
// predecessor, releasing its successor too early). The pair is harmless in
// a kernel launched the ordinary way. Inside a captured CUDA graph the
// overlap becomes a programmatic edge between the two kernel nodes.
// PLEXUS_OVERLAPPED_LAUNCH=0 launches every kernel the ordinary way.
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "plexus/context.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

namespace plexus::cuda {

__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void let_next_grid_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Whether launches on ctx's device overlap: compute capability >= 9.0 and
// not switched off by PLEXUS_OVERLAPPED_LAUNCH=0 (decided once per device).
bool overlapped_launches(const Context &ctx);

// `kernel`<<<grid, block, shared_bytes, stream(ctx)>>>(args...), overlapped
// with the previous kernel on the stream where overlapped_launches(ctx);
// checked, naming `name`.
template <class... Params, class... Args>
void launch_overlapped(const Context &ctx, const char *name,
                       void (*kernel)(Params...), dim3 grid, dim3 block,
                       std::size_t shared_bytes, Args &&...args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream(ctx);
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = overlapped_launches(ctx) ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...),
             name, __FILE__, __LINE__);
  check_launch(name, __FILE__, __LINE__);
}

} // namespace plexus::cuda
