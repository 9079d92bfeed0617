#include <cstdlib>
#include <cstring>

#include "backend.h"
#include "cuda/zero_spans.h"
#include "plexus/host_memory.h"
#include "plexus/cuda/blas.h"
#include "plexus/cuda/cuda_check.h"
#include "plexus/cuda/cuda_context.h"

#include <memory>

namespace plexus::device_memory {

namespace {
void select(Device device) { cuda::check_cuda(cudaSetDevice(device.index), "cudaSetDevice", __FILE__, __LINE__); }

// While this thread records a CUDA graph, memory work goes to the capturing
// stream (becoming graph nodes) instead of the legacy stream, which may not
// be touched during a capture.
thread_local cudaStream_t capture_stream = nullptr;
cudaStream_t memory_stream() { return capture_stream ? capture_stream : cudaStreamLegacy; }
}  // namespace

void set_capture_stream(void* stream) { capture_stream = static_cast<cudaStream_t>(stream); }

// Device memory is allocated and freed in order on the legacy default
// stream. Context streams are created blocking, so they synchronise with it:
// no kernel can see memory before its allocation or after its release.
void* allocate(std::size_t bytes, Device device) {
  if (device.is_cpu()) {
    try {
      return host_memory::allocate_zeroed(bytes);
    } catch (const std::bad_alloc&) {
      throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    }
  }
  if (device.index >= cuda_device_count())
    throw DeviceError("device " + device.str() + " requested, but " + std::to_string(cuda_device_count()) +
                      " CUDA device(s) are visible");
  select(device);
  void* pointer = nullptr;
  cuda::check_cuda(cudaMallocAsync(&pointer, bytes ? bytes : 1, memory_stream()), "cudaMallocAsync", __FILE__,
                   __LINE__);
  return pointer;
}

void release(void* pointer, Device device) noexcept {
  if (device.is_cpu()) {
    host_memory::release(pointer);
    return;
  }
  cudaSetDevice(device.index);
  cudaFreeAsync(pointer, memory_stream());  // cannot throw from a deleter
}

void* allocate_host_staging(std::size_t bytes, Device destination) {
  if (destination.is_cpu()) return allocate(bytes, destination);
  void* pointer = nullptr;
  cuda::check_cuda(cudaMallocHost(&pointer, bytes ? bytes : 1), "cudaMallocHost", __FILE__, __LINE__);
  return pointer;
}

void release_host_staging(void* pointer, Device destination) noexcept {
  if (destination.is_cpu()) release(pointer, destination);
  else cudaFreeHost(pointer);
}

void copy(void* destination, Device destination_device, const void* source, Device source_device, std::size_t bytes) {
  if (!bytes) return;
  if (destination_device.is_cpu() && source_device.is_cpu()) {
    std::memcpy(destination, source, bytes);
    return;
  }
  if (capture_stream) {
    cuda::check_cuda(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDefault, capture_stream), "cudaMemcpyAsync",
                     __FILE__, __LINE__);
    return;
  }
  cuda::check_cuda(cudaMemcpy(destination, source, bytes, cudaMemcpyDefault), "cudaMemcpy", __FILE__, __LINE__);
}

void fill_zero(void* pointer, std::size_t bytes, Device device) {
  if (!bytes) return;
  if (device.is_cpu()) {
    std::memset(pointer, 0, bytes);
    return;
  }
  select(device);
  cuda::check_cuda(cudaMemsetAsync(pointer, 0, bytes, memory_stream()), "cudaMemsetAsync", __FILE__, __LINE__);
}

void fill_zero(const std::vector<ByteSpan>& spans, Device device) {
  if (device.is_cpu()) {
    for (const ByteSpan& span : spans) fill_zero(span.pointer, span.bytes, device);
    return;
  }
  select(device);
  cuda::zero_spans(memory_stream(), spans);
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

bool built_with_cuda() { return true; }

}  // namespace plexus::device_memory

namespace plexus::cuda {

CudaResources* create_resources(int device, std::uint64_t seed) {
  int count = device_memory::cuda_device_count();
  if (device >= count)
    throw DeviceError("cuda:" + std::to_string(device) + " requested, but " + std::to_string(count) +
                      " CUDA GPU(s) are visible");
  // cuBLAS is loaded here, by the process's first CUDA context (plexus/cuda/blas.h), before anything is made.
  const CublasLibrary& blas = cublas_library();
  auto resources = std::make_unique<CudaResources>();
  resources->device = device;
  check_cuda(cudaSetDevice(device), "cudaSetDevice", __FILE__, __LINE__);
  // A blocking stream: it synchronises with the legacy stream on which
  // memory is allocated and freed (see allocate()).
  check_cuda(cudaStreamCreate(&resources->stream), "cudaStreamCreate", __FILE__, __LINE__);
  check_cublas(blas.create(&resources->cublas), "cublasCreate", __FILE__, __LINE__);
  check_cublas(blas.set_stream(resources->cublas, resources->stream), "cublasSetStream", __FILE__, __LINE__);
  check_curand(curandCreateGenerator(&resources->curand, CURAND_RNG_PSEUDO_PHILOX4_32_10), "curandCreateGenerator",
               __FILE__, __LINE__);
  check_curand(curandSetStream(resources->curand, resources->stream), "curandSetStream", __FILE__, __LINE__);
  // 32 MiB covers cuBLAS's largest Hopper workspace request.
  constexpr std::size_t kCublasWorkspaceBytes = 32u << 20;
  check_cuda(cudaMalloc(&resources->cublas_workspace, kCublasWorkspaceBytes), "cudaMalloc", __FILE__, __LINE__);
  check_cublas(blas.set_workspace(resources->cublas, resources->cublas_workspace, kCublasWorkspaceBytes),
               "cublasSetWorkspace", __FILE__, __LINE__);
  check_cuda(cudaMalloc(&resources->random_seed, sizeof(std::uint64_t)), "cudaMalloc", __FILE__, __LINE__);
  reseed(*resources, seed);
  return resources.release();
}

void destroy_resources(CudaResources* resources) noexcept {
  if (!resources) return;
  cudaSetDevice(resources->device);
  if (resources->curand) curandDestroyGenerator(resources->curand);
  if (resources->cublas) cublas_library().destroy(resources->cublas);  // made from it: loaded, cannot throw
  if (resources->branch_stream) {
    cudaStreamSynchronize(resources->branch_stream);
    cudaStreamDestroy(resources->branch_stream);
  }
  if (resources->branch_fork) cudaEventDestroy(resources->branch_fork);
  if (resources->branch_join) cudaEventDestroy(resources->branch_join);
  if (resources->stream) {
    cudaStreamSynchronize(resources->stream);  // nothing may still use the buffers freed below
    cudaStreamDestroy(resources->stream);
  }
  if (resources->cublas_workspace) cudaFree(resources->cublas_workspace);
  if (resources->random_seed) cudaFree(resources->random_seed);
  delete resources;
}

void reseed(CudaResources& resources, std::uint64_t seed) {
  check_curand(curandSetPseudoRandomGeneratorSeed(resources.curand, seed), "curandSetPseudoRandomGeneratorSeed",
               __FILE__, __LINE__);
  check_curand(curandSetGeneratorOffset(resources.curand, 0), "curandSetGeneratorOffset", __FILE__, __LINE__);
  write_seed(resources.stream, resources.random_seed, seed);
  resources.random_draws = 0;
}

void set_tf32(CudaResources& resources, bool allow) {
  check_cublas(
      cublas_library().set_math_mode(resources.cublas, allow ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
      "cublasSetMathMode", __FILE__, __LINE__);
}

void synchronize(CudaResources& resources) {
  join_branches(resources);
  check_cuda(cudaStreamSynchronize(resources.stream), "cudaStreamSynchronize", __FILE__, __LINE__);
}

void set_deferred_joins(CudaResources& resources, bool deferred) { resources.defer_joins = deferred; }

void join_branches(CudaResources& resources) {
  if (!resources.branch_pending) return;
  resources.branch_pending = false;
  check_cuda(cudaEventRecord(resources.branch_join, resources.branch_stream), "cudaEventRecord", __FILE__, __LINE__);
  check_cuda(cudaStreamWaitEvent(resources.stream, resources.branch_join, 0), "cudaStreamWaitEvent", __FILE__,
             __LINE__);
}

DeviceRandom device_random(const Context& ctx, std::uint64_t count) {
  CudaResources& r = resources(ctx);
  DeviceRandom draw{r.random_seed, r.random_draws};
  r.random_draws += count;
  return draw;
}

CudaResources& resources(const Context& ctx) {
  if (!ctx.cuda_resources()) throw DeviceError("a CUDA kernel was called with a " + ctx.device().str() + " context");
  return *ctx.cuda_resources();
}

namespace {
CudaResources& outside_branch(const Context& ctx, const char* library) {
  CudaResources& r = resources(ctx);
  if (in_branch(r))
    throw DeviceError(std::string(library) + " was called inside cuda::Branch::run: its handle is bound to the "
                                             "context's own stream, so run it outside the branch");
  return r;
}
}  // namespace

cublasHandle_t cublas(const Context& ctx) { return outside_branch(ctx, "cuBLAS").cublas; }
curandGenerator_t curand(const Context& ctx) { return outside_branch(ctx, "cuRAND").curand; }

}  // namespace plexus::cuda
